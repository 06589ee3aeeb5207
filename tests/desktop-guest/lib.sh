# Shared shell functions of tests/desktop-guest/run (sourced, not executed): cached root filesystem layers and the boot initramfs.
#   base layer:    debootstrap --variant=minbase of bookworm with systemd, udev, dbus, logind (as tests/debian-guest)
#   desktop layer: base + `apt-get install --no-install-recommends` of one desktop's packages in a chroot
# Each layer is a tarball in $cache named by a hash of its recipe, so it is built once and reused; the two newest
# files of each kind are kept. Needs: $cache, $work, log(), die().

# The bookworm mirror this host uses (deb822 sources first, then sources.list).
layers_mirror() {
  local m
  m=$(sed -n 's/^URIs: *\(http[^ ]*\/debian\)\/\{0,1\} *$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  [ -n "$m" ] || m=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$m" ] || die "no Debian mirror for bookworm in /etc/apt/sources.list*"
  echo "$m"
}

# Keeps the two newest files matching the glob pattern $1 in $cache.
layers_prune() {
  ls -1t "$cache"/$1 2>/dev/null | tail -n +3 | xargs -r rm -f
}

LAYERS_BASE_INCLUDE=systemd,systemd-sysv,udev,dbus,libpam-systemd

# Prints the path of the base tarball, building it when missing.
layers_base() {
  local mirror recipe key tar
  mirror=$(layers_mirror)
  recipe="v1 bookworm minbase $LAYERS_BASE_INCLUDE $mirror"
  key=$(printf '%s' "$recipe" | sha256sum | cut -c1-16)
  tar=$cache/base-$key.tar
  if [ ! -f "$tar" ]; then
    log "debootstrap bookworm (minbase + $LAYERS_BASE_INCLUDE) from $mirror"
    local t0=$SECONDS
    debootstrap --variant=minbase --include="$LAYERS_BASE_INCLUDE" bookworm "$work/base" "$mirror" \
      >"$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "$work/base/var/cache/apt/archives/"*.deb
    tar --numeric-owner -C "$work/base" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
    rm -rf "$work/base"
    layers_prune 'base-*.tar'
    log "base layer built in $((SECONDS - t0))s"
  fi
  echo "$tar"
}

# Runs apt-get in the chroot $1 with /proc mounted, no service starts, and the downloaded .debs kept in
# $cache/apt-archives (bind-mounted), so rebuilding a layer after a recipe change downloads only what is new.
layers_chroot_apt() {
  local root=$1; shift
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  mkdir -p "$cache/apt-archives/partial"
  mount -t proc proc "$root/proc"
  mount --bind "$cache/apt-archives" "$root/var/cache/apt/archives"
  local rc=0
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get "$@" || rc=$?
  umount "$root/var/cache/apt/archives"
  umount "$root/proc"
  rm -f "$root/usr/sbin/policy-rc.d"
  return $rc
}

# layers_desktop NAME PKG... : prints the path of the desktop layer tarball (base + PKGs), building it when missing.
layers_desktop() {
  local name=$1; shift
  local base key tar root
  base=$(layers_base)
  key=$(printf '%s\n' "v1" "$(basename "$base")" "$@" | sha256sum | cut -c1-16)
  tar=$cache/$name-$key.tar
  if [ ! -f "$tar" ]; then
    log "desktop layer $name: apt-get install --no-install-recommends $*"
    local t0=$SECONDS
    root=$work/layer-$name
    mkdir "$root"
    tar --numeric-owner -C "$root" -xpf "$base"
    layers_chroot_apt "$root" update -q >"$work/apt-$name.log" 2>&1 \
      || { tail -30 "$work/apt-$name.log" >&2; die "apt-get update failed in the $name chroot"; }
    layers_chroot_apt "$root" install -y -q --no-install-recommends "$@" >>"$work/apt-$name.log" 2>&1 \
      || { tail -30 "$work/apt-$name.log" >&2; die "apt-get install failed in the $name chroot"; }
    rm -rf "$root/var/lib/apt/lists/"*
    tar --numeric-owner -C "$root" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
    rm -rf "$root"
    layers_prune "$name-*.tar"
    log "desktop layer $name built in $((SECONDS - t0))s ($(du -h "$tar" | cut -f1))"
  fi
  echo "$tar"
}

# lib_initramfs KVER OUT: a busybox initramfs that loads virtio_blk + ext4 and switches to /dev/vda with systemd.
lib_initramfs() {
  local kver=$1 out=$2 ird=$work/initramfs f
  local mods="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk crc16 mbcache
      jbd2 crc32c_generic ext4"
  file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || die "static busybox missing (busybox-static)"
  mkdir -p "$ird/bin" "$ird/mod" "$ird/dev" "$ird/proc" "$ird/sys" "$ird/newroot"
  cp /bin/busybox "$ird/bin/busybox"
  for m in $mods; do  # insmod does not resolve dependencies: this order does
    f=$(modinfo -k "$kver" -F filename "$m" 2>/dev/null) || die "module $m not found for $kver"
    case "$f" in
      *.ko) cp "$f" "$ird/mod/$m.ko" ;;
      *.ko.xz) xz -dc "$f" >"$ird/mod/$m.ko" ;;
      *.ko.zst) zstd -qdc "$f" >"$ird/mod/$m.ko" ;;
      *) die "unexpected module file $f" ;;
    esac
  done
  cat >"$ird/init" <<INIT
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
for m in $(echo $mods); do /bin/busybox insmod /mod/\$m.ko || echo "initramfs: insmod \$m failed"; done
i=0
while [ ! -b /dev/vda ] && [ \$i -lt 100 ]; do /bin/busybox sleep 0.1; i=\$((i + 1)); done
/bin/busybox mount -t ext4 -o rw /dev/vda /newroot || { echo "initramfs: cannot mount /dev/vda"; exec /bin/busybox sh; }
/bin/busybox mount --move /dev /newroot/dev
/bin/busybox umount /proc /sys
exec /bin/busybox switch_root /newroot /sbin/init
INIT
  chmod 755 "$ird/init"
  (cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1 >"$out")
}

# lib_modules KVER ROOT: the host kernel's modules a desktop VM loads (DRM, input, virtio, filesystems), minus the
# big hardware trees, into ROOT/lib/modules/KVER, then depmod.
lib_modules() {
  local kver=$1 root=$2
  mkdir -p "$root/lib/modules"
  tar -C /lib/modules -cf - \
    --exclude="$kver/kernel/drivers/net" --exclude="$kver/kernel/drivers/media" --exclude="$kver/kernel/drivers/staging" \
    --exclude="$kver/kernel/drivers/infiniband" --exclude="$kver/kernel/drivers/scsi" --exclude="$kver/kernel/drivers/usb" \
    --exclude="$kver/kernel/drivers/gpu/drm/amd" --exclude="$kver/kernel/drivers/gpu/drm/nouveau" \
    --exclude="$kver/kernel/drivers/gpu/drm/i915" --exclude="$kver/kernel/drivers/gpu/drm/radeon" \
    --exclude="$kver/kernel/drivers/bluetooth" --exclude="$kver/kernel/drivers/isdn" \
    --exclude="$kver/kernel/sound" --exclude="$kver/kernel/net" "$kver" | tar -C "$root/lib/modules" -xf -
  depmod -b "$root" "$kver"
}
