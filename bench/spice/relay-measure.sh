#!/bin/bash
# usage: [PROFILE=release] measure.sh guestlink|vdagent — 64 MiB send-file through socat (one guest port, one host
# client) into guestlinkd + guestlink-session, or into the reference spice-vdagentd + spice-vdagent, on Xvfb.
set -u
RUN=$(mktemp -d); B=$(cd "$(dirname "$0")/../.." && pwd)/target/${PROFILE:-debug}
Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp 3>$RUN/dpy 2>/dev/null & XP=$!
while [ ! -s $RUN/dpy ]; do sleep 0.05; done; export DISPLAY=:$(cat $RUN/dpy)
mkdir -p $RUN/home/Downloads $RUN/home/.config $RUN/state $RUN/run
printf 'XDG_DOWNLOAD_DIR="$HOME/Downloads"\n' > $RUN/home/.config/user-dirs.dirs
AP=; DP=; SP=
cleanup() { kill $AP $DP $SP $XP 2>/dev/null; wait 2>/dev/null; rm -rf $RUN; }
trap cleanup EXIT
socat UNIX-LISTEN:$RUN/vport.sock UNIX-LISTEN:$RUN/chardev.sock & SP=$!
sleep 0.3
if [ "$1" = guestlink ]; then
  $B/guestlinkd -m none --no-logind -t $RUN/state --spice-path $RUN/vport.sock --session-socket $RUN/s.sock --uinput-fake $RUN/ev 2>$RUN/d.log & DP=$!
  while [ ! -S $RUN/s.sock ]; do sleep 0.05; done
  XDG_RUNTIME_DIR=$RUN/run $B/guestlink-session --socket $RUN/s.sock --download-dir $RUN/home/Downloads 2>$RUN/s.log & AP=$!
else
  : > $RUN/ev
  spice-vdagentd -x -X -f -u $RUN/ev -s $RUN/vport.sock -S $RUN/s.sock 2>$RUN/d.log & DP=$!
  while [ ! -S $RUN/s.sock ]; do sleep 0.05; done
  HOME=$RUN/home spice-vdagent -x -s $RUN/vport.sock -S $RUN/s.sock 2>$RUN/s.log & AP=$!
fi
for i in $(seq 100); do [ -S $RUN/chardev.sock ] && break; sleep 0.1; done
head -c $((64<<20)) /dev/urandom > $RUN/big.bin
t0=$(date +%s.%N); $B/guestlink --spice-socket $RUN/chardev.sock -q send-file $RUN/big.bin; rc=$?; t1=$(date +%s.%N)
echo "$1 send-file 64 MiB rc=$rc: $(echo "$t1 - $t0" | bc) s"
cmp $RUN/big.bin $RUN/home/Downloads/big.bin && echo "sha ok"

