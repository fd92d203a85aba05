#!/bin/sh
# Makes this machine a one-node Slurm cluster, to try srun and sbatch on a laptop or a
# test VM (root; Debian or Ubuntu): `one-node.sh start` installs slurm-wlm and munge if
# they are missing, writes a minimal configuration for this host's cores and starts
# munged, slurmctld and slurmd; `one-node.sh stop` stops them. The srun tests
# (`cargo test --workspace`, the Python tests) run wherever `sinfo` answers.
set -eu

conf=/etc/slurm/slurm.conf
host=$(hostname -s)

start() {
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge
    fi
    mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
    if [ -e "$conf" ] && ! grep -q '^# one-node.sh' "$conf"; then
        echo "one-node.sh: $conf exists and is not ours; leaving it" >&2
        exit 1
    fi
    # Cores as CPUs, and each core shared by up to 8 tasks: tests oversubscribe.
    cat > "$conf" <<EOF
# one-node.sh: a one-node cluster for tests
ClusterName=onenode
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ReturnToService=2
MpiDefault=none
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
    [ -s /etc/munge/munge.key ] || mungekey --create
    chown -R munge:munge /etc/munge /run/munge
    chmod 400 /etc/munge/munge.key
    pgrep -x munged >/dev/null || su -s /bin/sh munge -c munged
    pgrep -x slurmctld >/dev/null || slurmctld
    pgrep -x slurmd >/dev/null || slurmd
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        if sinfo --noheader --format=%a 2>/dev/null | grep -q up; then
            sinfo
            return 0
        fi
        sleep 1
    done
    echo "one-node.sh: the cluster did not come up; see /var/log/slurm/" >&2
    exit 1
}

stop() {
    for daemon in slurmd slurmctld munged; do
        pkill -x "$daemon" || true
        while pgrep -x "$daemon" >/dev/null; do sleep 0.2; done
    done
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: one-node.sh start|stop" >&2; exit 2 ;;
esac
