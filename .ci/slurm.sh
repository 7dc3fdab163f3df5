#!/bin/bash
# A single-node Slurm for CI (Debian bookworm, root, no systemd, no
# cgroups): ../shared/recipes/slurm-single-node.md, as run end to end on
# this kind of machine. The node is named after this host.
# usage: .ci/slurm.sh up DIR | down DIR     (then: export SLURM_CONF=DIR/slurm.conf)
set -euo pipefail
cmd=${1:?usage: slurm.sh up DIR | down DIR}; D=$(realpath -m "${2:?DIR}")
case $cmd in
up)
  for c in slurmctld slurmd srun sinfo munged; do
    command -v $c >/dev/null || [ -x /usr/sbin/$c ] || { echo "slurm.sh: $c is not installed" >&2; exit 1; }
  done
  mkdir -p "$D/state" "$D/spool"
  # munge: the Debian package makes a key; the daemon runs as user munge.
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=128 2>/dev/null
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge && chown munge:munge /run/munge
  if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged
  fi
  H=$(hostname -s)
  cat > "$D/slurm.conf" <<CONF
ClusterName=ci
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=2
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
  export SLURM_CONF=$D/slurm.conf
  slurmctld -f "$SLURM_CONF" -i
  slurmd -f "$SLURM_CONF" -N localhost
  for i in $(seq 1 200); do sinfo -h -o %T 2>/dev/null | grep -qx idle && exit 0; sleep 0.1; done
  echo "slurm.sh: slurm did not become idle; see $D/*.log" >&2; exit 1 ;;
down)
  pids=""
  for f in "$D/slurmd.pid" "$D/slurmctld.pid" /run/munge/munged.pid; do [ -s "$f" ] && pids="$pids $(cat "$f")"; done
  [ -n "$pids" ] && kill $pids 2>/dev/null || true
  for p in $pids; do for i in $(seq 1 100); do kill -0 $p 2>/dev/null || break; sleep 0.1; done; done ;;
*) echo "usage: slurm.sh up DIR | down DIR" >&2; exit 2 ;;
esac
