from lit_otclust.cli import console

if __name__ == "__main__":
    console()
