#!/bin/bash
# Boots the host's own systemd as PID 1 of private namespaces, with guard installed as
# `cargo xtask install --prefix /opt/guard --root STAGE` staged it, and changes nothing of the
# host. Run it through unshare, from a cgroup of its own (the cgroup namespace's root):
#
#   unshare --pid --mount --cgroup --uts --ipc --net --fork --kill-child \
#       tests/systemd/boot.sh STAGE SCRATCH
#
# then reach it with `nsenter -t PID1 -m -p -u -i -n -C systemctl ...`. SCRATCH is an empty
# directory; everything the system writes goes to a tmpfs mounted on it, in this mount
# namespace only. tests/suite/systemd.rs drives it.
set -euo pipefail
STAGE=$1 SCRATCH=$2
mount --make-rprivate /
mount -t tmpfs -o mode=0755 scratch "$SCRATCH"
mkdir -p "$SCRATCH"/{root,etc.upper,etc.work,var.upper,var.work}
R=$SCRATCH/root
# The host's root, read-only. Not an overlay: a program on overlayfs execs with the identity of
# the layer's file, not the one stat() gives, and the kernel's exec check compares identities.
mount --bind / "$R"
mount -o remount,bind,ro "$R"
# /etc (with the staged unit and policy) and /var are writable, their changes kept in SCRATCH.
mount -t overlay etc -o "lowerdir=$STAGE/etc:/etc,upperdir=$SCRATCH/etc.upper,workdir=$SCRATCH/etc.work" "$R/etc"
mount -t overlay var -o "lowerdir=/var,upperdir=$SCRATCH/var.upper,workdir=$SCRATCH/var.work" "$R/var"
for d in run tmp var/tmp srv opt; do mount -t tmpfs -o mode=0755 "$d" "$R/$d"; done
chmod 1777 "$R/tmp" "$R/var/tmp"
cp -a "$STAGE/opt/." "$R/opt/"
# The default policy's workspace, on a file system of its own (not the audit log's).
mkdir -p "$R/srv/agent/workspace"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
# systemd's default layout: the cgroup v2 hierarchy alone, rooted at this namespace's cgroup.
umount -l "$R/sys/fs/cgroup"
mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup"
mount -t tmpfs -o mode=0755 dev "$R/dev"
for d in null zero full random urandom tty; do
    touch "$R/dev/$d"
    mount --bind "/dev/$d" "$R/dev/$d"
done
mkdir -p "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs tmpfs "$R/dev/shm"
# A target with nothing of the host's own services: the test starts guardd itself.
cat > "$R/etc/systemd/system/guard-test.target" <<T
[Unit]
Description=guard's test boot
Requires=sysinit.target
After=sysinit.target
T
cd "$R"
# The old root goes on /run (a directory of the read-only root), and is detached at once.
pivot_root . run
umount -l /run
# Shared, as systemd makes / on a host (it leaves a container's as it finds it): a unit's
# credentials (LoadCredential=) are mounted in a namespace of its own and reach /run/credentials
# by propagation. These peer groups are this namespace's own; the host's mounts stay private.
mount --make-rshared /
export container=guard-test
exec /lib/systemd/systemd --unit=guard-test.target --log-target=console --log-level=info
