#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the tests marked `slurm` (and for trying scripts/slurm.sbatch).
#
#   sudo bash tests/cluster/slurm_up.sh        # as root; idempotent: a cluster already up is left as it is
#
# Installs Debian's slurm-wlm and munge when missing (apt), writes /etc/slurm/slurm.conf for this machine (its
# cores and memory as `slurmd -C` reads them; process tracking without cgroups: proctrack/linuxproc, task/none),
# starts munged, slurmctld and slurmd, and waits until `sinfo` shows the node idle. Refuses, with a reason on stderr
# and exit status 2, when not root, when apt cannot install, or when /etc/slurm/slurm.conf exists and was not
# written by this script (a real cluster's configuration is never overwritten).
set -euo pipefail
MARK="# written by lit_otclust tests/cluster/slurm_up.sh"
CONF=/etc/slurm/slurm.conf
refuse() { echo "slurm_up: $*" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || refuse "must run as root (it installs packages and starts the SLURM daemons)"
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || refuse "slurm-wlm and munge are missing and there is no apt-get to install them"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q slurm-wlm munge >/dev/null 2>&1; then
        apt-get update -q >/dev/null 2>&1 || true
        apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 || refuse "apt-get could not install slurm-wlm and munge (no package registry?)"
    fi
fi
if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
    refuse "$CONF exists and was not written by this script; not touching a real cluster's configuration"
fi

host=$(hostname -s)
if [ ! -f "$CONF" ]; then
    node=$(slurmd -C | head -1)  # NodeName=... CPUs=... RealMemory=...
    mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
    cat > "$CONF" <<CONF
$MARK
ClusterName=lit_otclust
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
JobRequeue=1
MpiDefault=none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
KillWait=30
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
fi

if [ ! -s /etc/munge/munge.key ]; then
    (command -v mungekey >/dev/null && mungekey --create --force) || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
    chown munge:munge /etc/munge/munge.key 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
fi
mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
pgrep -x munged >/dev/null || su -s /bin/sh munge -c munged 2>/dev/null || munged --force
pgrep -x slurmctld >/dev/null || slurmctld -i
pgrep -x slurmd >/dev/null || slurmd

for _ in $(seq 1 120); do
    if sinfo -h -N -o "%T" 2>/dev/null | grep -qE "^idle|^mixed|^allocated"; then
        scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true
        echo "slurm_up: node $host is up ($(sinfo -h -N -o '%T %c CPUs %m MB'))"
        exit 0
    fi
    # A node left down or drained by an earlier run of the daemons comes back.
    scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true
    sleep 0.5
done
refuse "the node did not become idle within 60 s; see /var/log/slurm/slurmctld.log and slurmd.log"
