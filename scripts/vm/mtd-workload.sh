#!/bin/sh
# Runs inside the guest (as /payload/run.sh, started by scripts/test-mtd.sh): fsoc on raw NAND
# from the kernel's nandsim, through /dev/mtd0. Each case loads nandsim with its own geometry
# and faults and prints `RESULT PASS|FAIL CASE STEP[: detail]`; `RESULT DONE` ends the run and
# `MEASURE ...` lines carry numbers for the report. Settings (from ./settings): CASES (the
# cases to run, in order), FILES (files in the copied tree), ROUNDS (kill -9 rounds).
set -a
. ./settings
set +a
cd /
up() { cut -d' ' -f1 /proc/uptime; }
case_name=setup
result() { # result PASS|FAIL STEP [DETAIL]
  echo "RESULT $1 $case_name $2${3:+: $3}"
}
check() { # check STEP COMMAND...: PASS if the command succeeds, else FAIL with its output's end
  step=$1
  shift
  if "$@" > /tmp/check.out 2>&1; then
    result PASS "$step"
  else
    result FAIL "$step" "$(tail -n 3 /tmp/check.out | tr '\n' ' ')"
    return 1
  fi
}

# nandsim with a geometry and faults; /dev/mtd0 appears through devtmpfs.
load_nandsim() {
  rmmod nandsim 2>/dev/null
  if ! load-module nandsim "$@" > /tmp/nandsim.out 2>&1; then
    result FAIL nandsim "insmod nandsim $*: $(tail -n 2 /tmp/nandsim.out | tr '\n' ' ')"
    return 1
  fi
  for _ in 1 2 3 4 5 6 7 8 9 10; do [ -c /dev/mtd0 ] && break; sleep 0.2; done
  [ -c /dev/mtd0 ] || { result FAIL nandsim "no /dev/mtd0 after insmod nandsim $*"; return 1; }
  echo "MEASURE $case_name geometry writesize=$(cat /sys/class/mtd/mtd0/writesize)" \
    "oobsize=$(cat /sys/class/mtd/mtd0/oobsize) oobavail=$(cat /sys/class/mtd/mtd0/oobavail)" \
    "erasesize=$(cat /sys/class/mtd/mtd0/erasesize) size=$(cat /sys/class/mtd/mtd0/size)"
}

mount_fsoc() { # mounts ${1:-/dev/mtd0} on /mnt/f in the background; mount_pid is its server
  mkdir -p /mnt/f
  fsoc mount "${1:-/dev/mtd0}" /mnt/f --commit-interval 0 > /tmp/mount.log 2>&1 &
  mount_pid=$!
  for _ in $(seq 1 150); do
    grep -q ' /mnt/f fuse' /proc/mounts && return 0
    kill -0 "$mount_pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "mount did not appear: $(tail -n 3 /tmp/mount.log | tr '\n' ' ')"
  return 1
}

umount_fsoc() {
  fsoc umount /mnt/f && wait "$mount_pid"
}

# The same from a shell that did not start the server (a subshell's, or a server started
# in one): waits until no fsoc process is left, at most 10 s.
umount_fsoc_any() {
  fsoc umount /mnt/f || return 1
  for _ in $(seq 1 100); do pidof fsoc > /dev/null || return 0; sleep 0.1; done
  echo "the fsoc server was still running 10 s after umount"
  return 1
}

# A tree of FILES files in a few directories, sizes 0 to ~40 KiB (a few spanning many pages),
# random contents, and its checksums.
make_tree() {
  rm -rf /tmp/src && mkdir -p /tmp/src
  i=0
  while [ $i -lt "$FILES" ]; do
    directory=/tmp/src/d$((i % 7))/e$((i % 3))
    mkdir -p "$directory"
    size=$(( (i * 7919) % 12000 ))
    [ $((i % 29)) = 0 ] && size=$((40000 + i))
    [ $((i % 31)) = 0 ] && size=0
    head -c "$size" /dev/urandom > "$directory/f$i"
    i=$((i + 1))
  done
  (cd /tmp/src && find . -type f | sort | xargs md5sum) > /tmp/src.md5
}

# The tree through the FUSE mount: copy in, unmount, remount, compare, unmount, fsck.
tree_through_fuse() {
  check mount mount_fsoc || return 1
  started=$(up)
  check copy_in cp -r /tmp/src /mnt/f/tree
  echo "MEASURE $case_name copy_in_seconds $(echo "$(up) $started" | awk '{ print $1 - $2 }')"
  check umount umount_fsoc || return 1
  check remount mount_fsoc || return 1
  check read_back sh -c 'cd /mnt/f/tree && md5sum -c -s /tmp/src.md5'
  check umount_again umount_fsoc
}

# The tree through the image tools, no mount: put -r, ls, get -r, compare.
tree_through_tools() {
  check put fsoc put -r /tmp/src /dev/mtd0:/tree
  check ls sh -c 'fsoc ls -r /dev/mtd0:/tree | grep -c "f[0-9]" | grep -qx "$FILES"'
  rm -rf /tmp/back
  check get fsoc get -r /dev/mtd0:/tree /tmp/back
  check read_back sh -c 'cd /tmp/back && md5sum -c -s /tmp/src.md5'
}

fsck_clean() {
  check fsck sh -c 'fsoc fsck /dev/mtd0 > /tmp/fsck.out 2>&1; status=$?; cat /tmp/fsck.out; exit $status'
  grep -h 'ecc:' /tmp/fsck.out | sed "s/^/MEASURE $case_name fsck /"
}

mount_reads() {
  reads=$(fsoc info /dev/mtd0 2>/dev/null | awk '/^mount page reads/ { print $4 }')
  echo "MEASURE $case_name mount_page_reads ${reads:-unknown}"
}

case_geometry_2k() { # 2 KiB pages, 64 OOB bytes (38 free with 1-bit Hamming ECC), 256 MiB
  load_nandsim id_bytes=0xec,0xda,0x10,0x95,0x44 || return
  check mkfs fsoc mkfs /dev/mtd0 || return
  check refuse_mkfs_over_data sh -c 'fsoc mkfs /dev/mtd0 2>&1 | grep -q "holds data"'
  tree_through_fuse
  fsck_clean
  mount_reads
}

case_geometry_4k() { # 4 KiB pages, 256 KiB blocks, 2 GiB (nandsim keeps only written pages)
  load_nandsim id_bytes=0xec,0xd5,0x51,0xa6,0x68 || return
  check mkfs fsoc mkfs /dev/mtd0 || return
  tree_through_tools
  check mount mount_fsoc && check read_back_mounted sh -c 'cd /mnt/f/tree && md5sum -c -s /tmp/src.md5' &&
    check umount umount_fsoc
  fsck_clean
  mount_reads
}

case_bad_blocks() { # factory bad blocks 20, 77 and 300: reported by mkfs and never used
  load_nandsim id_bytes=0xec,0xda,0x10,0x95,0x44 badblocks=20,77,300 || return
  fsoc mkfs /dev/mtd0 --force > /tmp/mkfs.out 2>&1
  check mkfs_reports_bad_blocks grep -q '3 factory bad block(s): 20, 77, 300' /tmp/mkfs.out
  tree_through_fuse
  fsck_clean
}

case_bit_flips() { # nandsim flips a bit in about one page read in 1,024: ECC corrects it
  load_nandsim id_bytes=0xec,0xda,0x10,0x95,0x44 bitflips=1 || return
  check mkfs fsoc mkfs /dev/mtd0 || return
  tree_through_fuse
  fsck_clean
  # A 4 MiB file read whole (2,048 page reads) until a read is corrected, at most 8 times:
  # every read must return the file's bytes, and the tool reports the corrections.
  head -c 4194304 /dev/urandom > /tmp/big
  check put_big fsoc put /tmp/big /dev/mtd0:/big || return
  big_md5=$(md5sum < /tmp/big)
  pass=0
  corrected=
  wrong=0
  while [ $pass -lt 8 ] && [ -z "$corrected" ]; do
    read_md5=$(fsoc cat /dev/mtd0:/big 2> /tmp/cat.err | md5sum)
    [ "$read_md5" = "$big_md5" ] || wrong=$((wrong + 1))
    corrected=$(sed -n 's/.*ecc: \([0-9]*\) page reads: \([1-9][0-9]*\) corrected by ECC (\([0-9]*\) bits).*/\2 of \1 reads, \3 bits/p' /tmp/cat.err)
    grep -h 'ecc:' /tmp/cat.err | sed "s/^/MEASURE $case_name cat /"
    pass=$((pass + 1))
  done
  if [ "$wrong" = 0 ]; then
    result PASS read_back_under_flips "$pass reads of 4 MiB, all right"
  else
    result FAIL read_back_under_flips "$wrong of $pass reads of 4 MiB wrong"
  fi
  if [ -n "$corrected" ]; then
    result PASS corrections_counted "$corrected corrected, in read $pass"
  else
    result FAIL corrections_counted "no corrected read in $pass reads of 4 MiB (about 2,048 page reads each)"
  fi
  check mount mount_fsoc && check read_back_after_flips sh -c 'cd /mnt/f/tree && md5sum -c -s /tmp/src.md5' &&
    check umount umount_fsoc
}

case_kill_rounds() { # kill -9 of the mount's server during fsync'd writes, ROUNDS times
  load_nandsim id_bytes=0xec,0xda,0x10,0x95,0x44 || return
  check mkfs fsoc mkfs /dev/mtd0 || return
  for blob in 0 1 2 3; do head -c $((blob * 3000 + 100)) /dev/urandom > /tmp/blob$blob; done
  lost=0
  checked=0
  round=1
  while [ "$round" -le "$ROUNDS" ]; do
    mount_fsoc > /tmp/round.out 2>&1 || { result FAIL "round$round" "mount: $(cat /tmp/round.out)"; return; }
    mkdir -p "/mnt/f/r$round"
    : > "/tmp/done$round"
    (
      i=0
      while [ $i -lt 5000 ]; do
        dd if=/tmp/blob$((i % 4)) of="/mnt/f/r$round/f$i" conv=fsync 2>/dev/null || exit 0
        echo "$i" >> "/tmp/done$round"
        i=$((i + 1))
      done
    ) &
    writer=$!
    usleep $(( (RANDOM % 1500 + 500) * 1000 ))
    kill -9 "$mount_pid"
    wait "$writer" 2>/dev/null
    wait "$mount_pid" 2>/dev/null
    umount -l /mnt/f 2>/dev/null || fusermount3 -u -z /mnt/f 2>/dev/null
    fsoc fsck /dev/mtd0 > /tmp/fsck.out 2>&1 || { result FAIL "round$round" "fsck: $(tail -n 2 /tmp/fsck.out)"; return; }
    mount_fsoc > /tmp/round.out 2>&1 || { result FAIL "round$round" "remount: $(cat /tmp/round.out)"; return; }
    # Every fsync'd file of every round so far is there with its contents.
    r=1
    while [ $r -le "$round" ]; do
      while read -r i; do
        checked=$((checked + 1))
        cmp -s "/tmp/blob$((i % 4))" "/mnt/f/r$r/f$i" || { lost=$((lost + 1)); echo "lost: round $r file $i"; }
      done < "/tmp/done$r"
      r=$((r + 1))
    done
    echo "MEASURE $case_name round $round fsynced $(wc -l < "/tmp/done$round")"
    umount_fsoc > /dev/null 2>&1
    round=$((round + 1))
  done
  if [ "$lost" = 0 ]; then
    result PASS fsynced_files_intact "$ROUNDS rounds, $checked checks of fsync'd files, 0 lost or wrong"
  else
    result FAIL fsynced_files_intact "$lost of $checked checks lost or wrong"
  fi
  fsck_clean
}

case_grown_bad_blocks() { # nandsim weakpages=: page 40 of blocks 4 to 12 fails its first program
  # Page 40, not lower: format's own first pages in block 4 must succeed (a failed program
  # during format ends it with an error; fsoc-core does not retry there).
  pages=
  for block in 4 5 6 7 8 9 10 11 12; do pages="${pages:+$pages,}$((block * 64 + 40)):0"; done
  load_nandsim id_bytes=0xec,0xda,0x10,0x95,0x44 weakpages="$pages" || return
  check mkfs fsoc mkfs /dev/mtd0 || return
  tree_through_fuse
  fsck_clean
  dmesg > /tmp/dmesg.out
  failed=$(grep -ci 'write failure\|program failed\|write error' /tmp/dmesg.out)
  echo "MEASURE $case_name failed_programs_in_kernel_log $failed"
  if [ "$failed" -gt 0 ]; then
    result PASS programs_failed "$failed failed program(s) in the kernel log; the tree read back intact"
  else
    result FAIL programs_failed "no failed program in the kernel log: the case tested nothing"
  fi
}

case_array() { # two MTD partitions of one nandsim chip (parts=1024) as a 2-chip array
  load_nandsim id_bytes=0xec,0xda,0x10,0x95,0x44 parts=1024 || return
  [ -c /dev/mtd1 ] || { result FAIL partitions "no /dev/mtd1 after parts=1024"; return; }
  check mkfs fsoc mkfs /dev/mtd0,/dev/mtd1 || return
  check info_lists_two_chips sh -c 'fsoc info /dev/mtd0,/dev/mtd1 | grep -q "^geometry *2 chips"'
  check put fsoc put -r /tmp/src /dev/mtd0,/dev/mtd1:/tree
  rm -rf /tmp/back
  check get fsoc get -r /dev/mtd0,/dev/mtd1:/tree /tmp/back
  check read_back sh -c 'cd /tmp/back && md5sum -c -s /tmp/src.md5'
  check one_chip_is_refused sh -c '! fsoc info /dev/mtd1 > /dev/null 2>&1'
  check mount mount_fsoc /dev/mtd0,/dev/mtd1 &&
    check read_back_mounted sh -c 'cd /mnt/f/tree && md5sum -c -s /tmp/src.md5' && check umount umount_fsoc
  check fsck fsoc fsck /dev/mtd0,/dev/mtd1
}

# `fsoc rebuild` on an MTD array: chip 1 of a 3-chip parity array ($volume) lost and rebuilt.
# rebuild_phase HOW: with chip 1 lost (HOW: blank, garbage), a rebuild of the wrong chip is
# refused and nothing is erased; the volume reads degraded (info, fsck, get -r byte-identical,
# a write refused); then chip 1 is rebuilt and the volume is checked whole (rebuilt_checks).
rebuild_phase() {
  phase=$1
  export phase
  check "wrong_chip_refused_$phase" sh -c 'fsoc rebuild "$volume" --chip 2 > /tmp/rebuild.out 2>&1; status=$?;
    cat /tmp/rebuild.out; [ $status = 2 ] && grep -q "chip 1 holds no readable fsoc superblock" /tmp/rebuild.out'
  check "degraded_${phase}_info" sh -c 'fsoc info "$volume" > /tmp/info.out 2>&1; status=$?; cat /tmp/info.out;
    [ $status = 0 ] && grep -q "^degraded *chip 1 is missing or dead" /tmp/info.out'
  check "degraded_${phase}_fsck" fsoc fsck "$volume"
  rm -rf /tmp/back
  check "degraded_${phase}_get" fsoc get -r "$volume:/tree" /tmp/back &&
    check "degraded_${phase}_read_back" sh -c 'cd /tmp/back && md5sum -c -s /tmp/src.md5'
  check "degraded_${phase}_write_refused" sh -c '! fsoc put /tmp/src.md5 "$volume:/refused" > /tmp/put.out 2>&1 &&
    grep -q "read-only" /tmp/put.out || { cat /tmp/put.out; exit 1; }'
  rebuild_step
  rebuilt_checks
}

rebuild_step() { # fsoc rebuild --chip 1, timed; it must end "mounted whole" and fsck clean
  started_rebuild=$(up)
  check "rebuild_$phase" sh -c 'fsoc rebuild "$volume" --chip 1 > /tmp/rebuild.out 2>&1; status=$?;
    cat /tmp/rebuild.out; [ $status = 0 ] && grep -q "mounted whole" /tmp/rebuild.out'
  rebuild_us=$(echo "$(up) $started_rebuild" | awk '{ printf "%d", ($1 - $2) * 1000000 }')
  echo "MEASURE $case_name rebuild_${phase}_seconds $(echo "$(up) $started_rebuild" | awk '{ print $1 - $2 }')"
  grep -h 'rebuilt from the other chips' /tmp/rebuild.out | sed "s/^/MEASURE $case_name rebuild_$phase /"
}

rebuilt_checks() { # whole (info), fsck clean, the tree byte-identical, a new file written and read back
  check "rebuilt_${phase}_info_whole" sh -c 'fsoc info "$volume" > /tmp/info.out 2>&1; status=$?; cat /tmp/info.out;
    [ $status = 0 ] && ! grep -q "^degraded" /tmp/info.out'
  check "rebuilt_${phase}_fsck" fsoc fsck "$volume"
  rm -rf /tmp/back
  check "rebuilt_${phase}_get" fsoc get -r "$volume:/tree" /tmp/back &&
    check "rebuilt_${phase}_read_back" sh -c 'cd /tmp/back && md5sum -c -s /tmp/src.md5'
  head -c 70000 /dev/urandom > "/tmp/new_$phase"
  check "rebuilt_${phase}_write" fsoc put "/tmp/new_$phase" "$volume:/new_$phase" &&
    check "rebuilt_${phase}_write_read_back" sh -c 'fsoc cat "$volume:/new_$phase" | cmp -s - "/tmp/new_$phase"'
}

case_rebuild() { # 3 partitions (parts=256,256,256: 32 MiB each) as a 3-chip parity array
  load_nandsim id_bytes=0xec,0xda,0x10,0x95,0x44 parts=256,256,256 || return
  [ -c /dev/mtd2 ] || { result FAIL partitions "no /dev/mtd2 after parts=256,256,256"; return; }
  command -v flash_erase > /dev/null || { result FAIL tools "flash_erase missing (mtd-utils on the host)"; return; }
  volume=/dev/mtd0,/dev/mtd1,/dev/mtd2
  export volume
  check mkfs_parity fsoc mkfs "$volume" --redundancy parity || return
  check info_parity sh -c 'fsoc info "$volume" | grep -q "^redundancy *parity"'
  check put fsoc put -r /tmp/src "$volume:/tree" || return
  check replacement_refused sh -c 'fsoc rebuild "$volume" --chip 1 --replacement /dev/mtd3 > /tmp/rebuild.out 2>&1;
    [ $? = 2 ] && grep -q "on MTD the new chip is the device in position 1" /tmp/rebuild.out'
  check chip_beyond_refused sh -c 'fsoc rebuild "$volume" --chip 3 2>&1 | grep -q "numbered 0 to 2"'

  # A blank new chip in place of chip 1 (every block erased).
  check erase_chip1 flash_erase -q /dev/mtd1 0 0 || return
  rebuild_phase blank
  rebuild_half_us=$((rebuild_us / 2))
  # The FUSE mount of the rebuilt volume: the tree and the new file, and a write.
  check mount mount_fsoc "$volume" &&
    check read_back_mounted sh -c 'cd /mnt/f/tree && md5sum -c -s /tmp/src.md5 && cmp -s /mnt/f/new_blank /tmp/new_blank' &&
    check write_mounted cp /tmp/new_blank /mnt/f/copy && check umount umount_fsoc &&
    check written_mounted_read_back sh -c 'fsoc cat "$volume:/copy" | cmp -s - /tmp/new_blank'

  # Chip 1 holding garbage, not erased: random bytes programmed over every page (nandsim ANDs
  # them into what is there, as NAND would), so its pages fail their ECC.
  check garbage_chip1 sh -c 'page=$(cat /sys/class/mtd/mtd1/writesize);
    dd if=/dev/urandom of=/dev/mtd1 bs=$page count=$(($(cat /sys/class/mtd/mtd1/size) / page))'
  rebuild_phase garbage

  # Chip 1 holding another fsoc volume: no degraded mount (a foreign chip is refused by the
  # chip-set check), but the refusal names the position and the rebuild, which overwrites it.
  phase=foreign
  check foreign_chip1 fsoc mkfs /dev/mtd1 --force
  check foreign_refused sh -c 'fsoc info "$volume" > /tmp/info.out 2>&1; status=$?; cat /tmp/info.out;
    [ $status = 2 ] && grep -q "chip in position 1 belongs to volume" /tmp/info.out &&
    grep -q "fsoc rebuild $volume --chip 1" /tmp/info.out'
  rebuild_step
  rebuilt_checks

  # A rebuild killed (-9) halfway: chip 1 holds no superblock until the rest is written, so the
  # volume still reads degraded (or, killed after the last write, whole and clean); run again,
  # the rebuild completes. The kill comes at half the blank rebuild's time, earlier if it finished.
  phase=interrupted
  killed=
  for delay in $rebuild_half_us $((rebuild_half_us / 2)) $((rebuild_half_us / 4)); do
    flash_erase -q /dev/mtd1 0 0 > /dev/null 2>&1
    fsoc rebuild "$volume" --chip 1 > /tmp/rebuild.out 2>&1 &
    rebuild_pid=$!
    usleep "$delay"
    kill -9 "$rebuild_pid" 2>/dev/null
    wait "$rebuild_pid"
    [ $? = 137 ] && { killed=$delay; break; }
  done
  if [ -n "$killed" ]; then
    result PASS rebuild_killed "after $killed us"
  else
    result FAIL rebuild_killed "every rebuild finished before its kill (last after $delay us)"
  fi
  check killed_degraded_or_whole sh -c 'fsoc info "$volume" > /tmp/info.out 2>&1 || { cat /tmp/info.out; exit 1; }
    grep -q "^degraded *chip 1 is missing or dead" /tmp/info.out || fsoc fsck "$volume"'
  grep -q '^degraded' /tmp/info.out && echo "MEASURE $case_name killed_rebuild_left degraded" ||
    echo "MEASURE $case_name killed_rebuild_left whole"
  rm -rf /tmp/back
  check killed_get sh -c 'fsoc get -r "$volume:/tree" /tmp/back && cd /tmp/back && md5sum -c -s /tmp/src.md5'
  rebuild_step
  rebuilt_checks
}

# Page reads, programs and erases of the NAND layer, counted by kprobes (nandsim has no
# counters): `count_ops COMMAND...` prints "reads programs erases" of the command.
kprobes_ready=
kprobes_setup() {
  [ -n "$kprobes_ready" ] && return 0
  tracing=/sys/kernel/tracing
  grep -q " $tracing tracefs" /proc/mounts || mount -t tracefs nodev "$tracing" || return 1
  echo 'p:nand_reads nand_read_page_op' >> "$tracing/kprobe_events" &&
    echo 'p:nand_programs nand_prog_page_begin_op' >> "$tracing/kprobe_events" &&
    echo 'p:nand_erases nand_erase_op' >> "$tracing/kprobe_events" &&
    echo 1 > "$tracing/events/kprobes/enable" || return 1
  kprobes_ready=1
}
kprobe_hits() { awk '$1 == "nand_reads" { r = $2 } $1 == "nand_programs" { p = $2 } $1 == "nand_erases" { e = $2 }
  END { print r + 0, p + 0, e + 0 }' /sys/kernel/tracing/kprobe_profile; }
count_ops() {
  before=$(kprobe_hits)
  "$@" > /tmp/count.out 2>&1 || { echo "failed: $* $(tail -n 2 /tmp/count.out | tr '\n' ' ')"; return 1; }
  after=$(kprobe_hits)
  echo "$before $after" | awk '{ print $4 - $1, $5 - $2, $6 - $3 }'
}

ubi_attach_and_mount() { ubiattach -m 0 > /dev/null && mount -t ubifs ubi0:r /mnt/u; }

case_mount_reads() { # fsoc mount vs UBI attach + UBIFS mount, page reads by kprobes, 256 MiB and 1 GiB
  command -v ubiformat > /dev/null || { result FAIL tools "ubiformat missing (mtd-utils on the host)"; return; }
  # UBIFS's compressors are soft dependencies, not loaded with it.
  load-module zstd > /dev/null 2>&1
  load-module ubifs > /dev/null 2>&1
  for size in 256M:0 1G:13; do
    label=${size%%:*}
    override=${size#*:}
    extra=
    [ "$override" = 0 ] || extra="overridesize=$override"
    # fsoc: format, the tree in, then a read-only mount + root listing + unmount, counted.
    load_nandsim id_bytes=0xec,0xda,0x10,0x95,0x44 $extra || return
    # The probed functions are in the nand module, loaded with nandsim.
    kprobes_setup || { result FAIL kprobes "cannot set kprobes on nand_read_page_op"; return; }
    fsoc mkfs /dev/mtd0 > /dev/null 2>&1 && fsoc put -r /tmp/src /dev/mtd0:/tree > /dev/null 2>&1 ||
      { result FAIL "fsoc_$label" "mkfs or put failed"; return; }
    fsoc_own=$(fsoc info /dev/mtd0 2>/dev/null | awk '/^mount page reads/ { print $4 }')
    fsoc_ops=$(count_ops fsoc ls /dev/mtd0:/) || { result FAIL "fsoc_$label" "$fsoc_ops"; return; }
    echo "MEASURE $case_name $label fsoc mount+ls+unmount reads/programs/erases $fsoc_ops (fsoc's own mount count $fsoc_own)"
    # UBI + UBIFS on a fresh chip of the same size, formatted by ubiformat (as on a product:
    # otherwise the counted attach still formats empty blocks), one volume, the tree in.
    load_nandsim id_bytes=0xec,0xda,0x10,0x95,0x44 $extra || return
    mkdir -p /mnt/u
    { ubiformat -y -q /dev/mtd0 && ubiattach -m 0 && ubimkvol /dev/ubi0 -N r -m && mount -t ubifs ubi0:r /mnt/u &&
      cp -r /tmp/src /mnt/u/tree && umount /mnt/u && ubidetach -m 0; } > /tmp/ubi.out 2>&1 ||
      { result FAIL "ubi_$label" "$(tail -n 2 /tmp/ubi.out | tr '\n' ' ')"; return; }
    ubi_ops=$(count_ops ubi_attach_and_mount) || { result FAIL "ubi_$label" "$ubi_ops"; return; }
    umount /mnt/u; ubidetach -m 0 > /dev/null 2>&1
    echo "MEASURE $case_name $label ubi attach+ubifs mount reads/programs/erases $ubi_ops"
    fsoc_reads=${fsoc_ops%% *}
    ubi_reads=${ubi_ops%% *}
    if [ "$fsoc_reads" -gt 0 ] && [ "$fsoc_reads" -lt "$ubi_reads" ]; then
      result PASS "fewer_mount_reads_$label" "fsoc $fsoc_reads page reads, UBI+UBIFS $ubi_reads"
    else
      result FAIL "fewer_mount_reads_$label" "fsoc $fsoc_reads page reads, UBI+UBIFS $ubi_reads"
    fi
  done
}

# The kernel's NFS server (nfsd, NFSv4.2 only: no rpcbind) exporting the FUSE mount /mnt/f
# over loopback TCP, the client on /mnt/n. Needs the nfs-kernel-server programs on the host
# (scripts/test-mtd.sh packs them) and /payload/netconfig (libtirpc's).
nfs_start() {
  for program in rpc.nfsd rpc.mountd exportfs mount.nfs; do
    command -v "$program" > /dev/null || { echo "$program missing (nfs-kernel-server on the host)"; return 1; }
  done
  { load-module nfsd && load-module nfsv4; } > /tmp/nfs.out 2>&1 ||
    { echo "the kernel has no NFS server: $(tail -n 1 /tmp/nfs.out)"; return 1; }
  cp /payload/netconfig /etc/netconfig
  ip link set lo up
  mkdir -p /proc/fs/nfsd /var/lib/nfs/v4recovery /run/rpc_pipefs /mnt/n
  grep -q ' /proc/fs/nfsd ' /proc/mounts || mount -t nfsd nfsd /proc/fs/nfsd || return 1
  grep -q ' /run/rpc_pipefs ' /proc/mounts || mount -t rpc_pipefs rpc_pipefs /run/rpc_pipefs
  # The shortest grace period the kernel takes: new opens wait for its end.
  echo 10 > /proc/fs/nfsd/nfsv4gracetime
  echo 10 > /proc/fs/nfsd/nfsv4leasetime
  : > /var/lib/nfs/etab
  : > /var/lib/nfs/rmtab
  # A FUSE mount has no device number to name it by: fsid= is required.
  echo "/mnt/f 127.0.0.1(rw,sync,no_root_squash,no_subtree_check,fsid=7)" > /etc/exports
  exportfs -ra && rpc.mountd -N 3 && rpc.nfsd -N 3 -p 2049 4 || return 1
  mount.nfs 127.0.0.1:/mnt/f /mnt/n -o vers=4.2,hard,timeo=100
}

nfs_stop() {
  umount /mnt/n 2>/dev/null
  rpc.nfsd 0 2>/dev/null
  killall rpc.mountd 2>/dev/null
  exportfs -ua 2>/dev/null
}

# Evicts every cached inode and dentry, the client's and the FUSE mount's: what the server is
# asked next, it must find by file handle.
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# in_dir DIR COMMAND...: stands in DIR (the client keeps its file handle, the FUSE mount may
# not keep its inode), drops the caches, then runs COMMAND there: every name COMMAND looks up
# goes through DIR's handle, which the FUSE mount must decode after the eviction.
in_dir() (
  cd "$1" || exit 1
  shift
  drop_caches
  "$@"
)

# fsoc's FUSE mount exported over NFS (issue 18): create, write, read, rename, delete, with
# the caches dropped between steps; a handle of a removed directory answers ESTALE, and the
# client's handles outlive an unmount and remount of the fsoc volume under the export.
case_nfs_export() {
  load_nandsim id_bytes=0xec,0xda,0x10,0x95,0x44 || return
  check mkfs fsoc mkfs /dev/mtd0 || return
  check mount mount_fsoc || return
  if ! nfs_start > /tmp/nfs_start.out 2>&1; then
    # Not a pass: the case was asked for, so a missing server is a failure here
    # (scripts/test-mtd.sh leaves the case out, saying SKIP, where the host cannot pack one).
    result FAIL nfs_server "$(tail -n 3 /tmp/nfs_start.out | tr '\n' ' ')"
    nfs_stop; umount_fsoc > /dev/null 2>&1; return
  fi
  result PASS nfs_server "exported /mnt/f, NFSv4.2 client on /mnt/n"
  started=$(up)
  check create cp -r /tmp/src /mnt/n/tree
  echo "MEASURE $case_name nfs_copy_in_seconds $(echo "$(up) $started" | awk '{ print $1 - $2 }')"
  check read_nfs in_dir /mnt/n/tree md5sum -c -s /tmp/src.md5
  drop_caches
  check read_fuse sh -c 'cd /mnt/f/tree && md5sum -c -s /tmp/src.md5'
  # Writes through NFS: an append, an overwrite in the middle, a truncate; the same to a
  # local copy, compared after the caches are dropped.
  # (In d6, which no later step renames or compares with /tmp/src.)
  victim=$(cd /tmp/src && find ./d6 -type f -size +4k | sort | head -n 1)
  cp "/tmp/src/$victim" /tmp/expected
  drop_caches
  check write sh -c "head -c 5000 /dev/urandom > /tmp/more && cat /tmp/more >> /mnt/n/tree/$victim &&
    cat /tmp/more >> /tmp/expected &&
    printf 'overwritten in the middle' | dd of=/mnt/n/tree/$victim bs=1 seek=1234 conv=notrunc 2>/dev/null &&
    printf 'overwritten in the middle' | dd of=/tmp/expected bs=1 seek=1234 conv=notrunc 2>/dev/null"
  check read_written in_dir "/mnt/n/tree/$(dirname "$victim")" cmp /tmp/expected "$(basename "$victim")"
  drop_caches
  check read_written_fuse cmp /tmp/expected "/mnt/f/tree/$victim"
  # Renames: a directory into another, a file across directories.
  check rename sh -c 'mv /mnt/n/tree/d1 /mnt/n/tree/d2/moved && mv /mnt/n/tree/d3/e0 /mnt/n/tree/d4/e0-moved'
  check read_renamed in_dir /mnt/n/tree/d2/moved sh -c 'for f in $(cd /tmp/src/d1 && find . -type f); do
      cmp "/tmp/src/d1/$f" "$f" || exit 1; done &&
    for f in $(cd /tmp/src/d3/e0 && find . -type f); do cmp "/tmp/src/d3/e0/$f" "../../d4/e0-moved/$f" || exit 1; done'
  # A handle that outlives its file: the client stands in a directory that is removed on the
  # server's side (not through NFS), new directories take inode numbers after it, the caches
  # go; the client's handle must answer ESTALE, never another file's contents.
  mkdir -p /mnt/n/gone/inner && echo here > /mnt/n/gone/inner/file
  old_inode=$(ls -id /mnt/n/gone/inner | awk '{ print $1 }')
  (
    cd /mnt/n/gone/inner || exit 3
    rm -r /mnt/f/gone
    for i in 1 2 3 4 5 6 7 8; do mkdir -p "/mnt/f/new$i/inner" && echo "new $i" > "/mnt/f/new$i/inner/file"; done
    drop_caches
    if ls . > /tmp/stale.out 2>&1 || cat file >> /tmp/stale.out 2>&1; then exit 1; fi
    grep -qi 'stale' /tmp/stale.out
  ) && result PASS stale_handle "a removed directory's handle answers ESTALE" ||
    result FAIL stale_handle "$(head -c 300 /tmp/stale.out | tr '\n' ' ')"
  reused=$(ls -id /mnt/f/new*/inner | awk -v old="$old_inode" '$1 == old { n++ } END { print n + 0 }')
  echo "MEASURE $case_name stale_handle old_inode=$old_inode reused_by_new=$reused"
  # The fsoc volume unmounted and mounted again under the export while the client stands in
  # one of its directories: the client's handles name the same files afterwards.
  (
    cd /mnt/n/tree/d5 || exit 3
    expected=$(cd /tmp/src/d5 && find . -type f | sort | xargs md5sum)
    exportfs -ua && umount_fsoc_any || { echo "unexport or unmount failed"; exit 1; }
    mount_fsoc || exit 1
    exportfs -ra || exit 1
    drop_caches
    [ "$(find . -type f | sort | xargs md5sum)" = "$expected" ] || { echo "d5 differs after the remount"; exit 1; }
  ) > /tmp/remount.out 2>&1 && result PASS handles_after_remount ||
    result FAIL handles_after_remount "$(tail -n 3 /tmp/remount.out | tr '\n' ' ')"
  check delete rm -r /mnt/n/tree
  drop_caches
  check deleted_nfs sh -c '! ls /mnt/n/tree > /dev/null 2>&1'
  check deleted_fuse sh -c '! ls /mnt/f/tree > /dev/null 2>&1'
  nfs_stop
  # The server now running was started by the subshell above.
  check umount umount_fsoc_any
  fsck_clean
}

case_bench_quick() { # `fsoc bench mtd --quick` at 256 MiB: every measurement of the benchmark runs
  rmmod nandsim 2>/dev/null
  check bench_mtd_quick sh -c 'fsoc bench mtd --quick --sizes 256M --json /tmp/bench-mtd.json \
    --module-loader load-module --scratch /tmp > /tmp/bench.out 2>&1; status=$?; tail -n 3 /tmp/bench.out; exit $status'
  grep -h '^bench mtd: ' /tmp/bench.out | sed "s/^/MEASURE $case_name /"
  check bench_json_written grep -q '"small_files"' /tmp/bench-mtd.json
}

echo "guest: cases $CASES, $FILES files, $ROUNDS kill rounds"
load-module fuse > /dev/null 2>&1
[ -c /dev/fuse ] || mknod /dev/fuse c 10 229
make_tree
for case_name in $CASES; do
  started=$(up)
  "case_$case_name"
  echo "MEASURE $case_name seconds $(echo "$(up) $started" | awk '{ print $1 - $2 }')"
done
rmmod nandsim 2>/dev/null
echo "RESULT DONE"
