"""The paper's numbers, in one place: Table 1 (:data:`PAPER`), the p-values its text reports (:data:`PAPER_P`) and
its runs a column (:data:`PAPER_RUNS`), from Genevay, Dulac-Arnold and Vert (AISTATS 2020). :mod:`lit_otclust.lab.stats`
sets ours beside them; the notebook reads them through ``lit_otclust.lab.experiments``."""

# Table 1 of the paper: mean, std, min, max of the accuracy over 50 runs of 200 epochs.
PAPER = {
    "mnist": {"kmeans": (0.513, None, None, None), "ae_kmeans": (0.801, 0.025, 0.765, 0.912),
              "soft_kmeans": (0.810, 0.033, 0.677, 0.883), "soft_kmeans_p": (0.837, 0.032, 0.781, 0.923),
              "ot": (0.851, 0.032, 0.771, 0.932), "ot_p": (0.846, 0.040, 0.759, 0.928)},
    "cifar10": {"kmeans": (0.206, None, None, None), "ae_kmeans": (0.237, 0.005, 0.230, 0.259),
                "soft_kmeans": (0.239, 0.008, 0.227, 0.257), "soft_kmeans_p": (0.243, 0.010, 0.227, 0.261),
                "ot": (0.243, 0.007, 0.232, 0.260), "ot_p": (0.244, 0.009, 0.230, 0.266)},
}
# The p-values of the paper's Welch t-tests over its 50 runs a column (its Section 4, beside Table 1), as printed.
PAPER_P = {
    "mnist": {("ot", "soft_kmeans"): "1e-12", ("ot_p", "soft_kmeans_p"): "0.10", ("ot_p", "ot"): "> 0.2",
              ("soft_kmeans_p", "soft_kmeans"): "< 0.05"},
    "cifar10": {("ot", "soft_kmeans"): "0.0067", ("ot_p", "soft_kmeans_p"): "0.33", ("ot_p", "ot"): "> 0.2",
                ("soft_kmeans_p", "soft_kmeans"): "< 0.05"},
}
PAPER_RUNS = 50  # runs of 200 epochs behind each of Table 1's columns
