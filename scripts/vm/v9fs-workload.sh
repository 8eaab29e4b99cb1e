#!/bin/sh
# Runs inside the guest as /payload/run.sh (scripts/test-v9fs.sh packs it): mounts the
# kernel's 9P2000.L client (v9fs) on a 9P server on the host and runs a workload of ordinary
# programs (busybox, and v9fs-probe for the system calls busybox cannot make), once per cache
# mode, each in a directory of its own. Prints one line per step:
#   RESULT PASS <cache> <step>
#   RESULT FAIL <cache> <step>: <what differed>
# then `RESULT DONE <failures>`; the host counts them. Settings come from /payload/settings
# (CACHE_MODES, MSIZE, MANY_FILES, MANY_FIDS, TCP_PORT, EXTRA_OPTIONS).
#
# The transport: the guest has no network, so the 9P bytes cross a virtio-serial port that
# QEMU connects to the server's UNIX socket. trans=fd cannot use the port itself (virtio
# ports have no read_iter/write_iter, which kernel_read and kernel_write need), so two FIFOs
# carry the bytes and two cats relay them to and from one open of the port (it takes a single
# opener). This shell keeps both FIFOs open on fds 3 and 4 for the whole run, so the relay
# never sees end of file and every mount (and remount) reuses the same connection: each mount
# starts with Tversion, which begins a new session on the server. The FIFOs' buffers are grown
# past any msize (v9fs-probe pipe-size says why): with the default 64 KiB, the first message
# over 64 KiB (a 128 KiB Twrite at the client's default msize) hangs the mount.
. /payload/settings
PATH=/payload:$PATH
failures=0
source_directory=/tmp/source

say() { echo "RESULT $*"; }
pass() { say "PASS $cache $1"; }
fail() { say "FAIL $cache $1: $2"; failures=$((failures + 1)); }
# step NAME COMMAND...: runs COMMAND (a shell function), PASS if it returns 0, else FAIL with
# the last line it printed.
step() {
  name=$1; shift
  step_start=$(cut -d' ' -f1 /proc/uptime)
  output=$("$@" 2>&1)
  status=$?
  seconds=$(awk -v start=$step_start '{ printf "%.1f", $1 - start }' /proc/uptime)
  if [ $status -eq 0 ]; then
    pass "$name ($seconds s)"
  else
    fail "$name" "$(echo "$output" | tail -n 3 | tr '\n' ' ')(status $status, $seconds s)"
  fi
}
expect() { # expect WHAT ACTUAL EXPECTED
  [ "$2" = "$3" ] || { echo "$1: got '$2', expected '$3'"; return 1; }
}

# busybox-static has no mountpoint applet.
mounted() { grep -q ' /mnt/9 9p ' /proc/mounts; }
# The mode "default" mounts with the client's defaults (version, msize, access, cache) and
# the transport options only; "tcp" mounts over TCP (trans=tcp to the host's loopback through
# QEMU's user network, a second connection to the same server) with the largest msize, 1 MiB.
mount_9p() {
  source=fsoc
  case "$cache" in
    default) options="trans=fd,rfdno=3,wfdno=4" ;;
    tcp)
      options="trans=tcp,port=$TCP_PORT,version=9p2000.L,msize=1048576,access=client,cache=none"
      source=10.0.2.2
      ;;
    *) options="trans=fd,rfdno=3,wfdno=4,version=9p2000.L,msize=$MSIZE,access=client,cache=$cache" ;;
  esac
  mount -t 9p -o "$options$EXTRA_OPTIONS" $source /mnt/9 || return 1
  mounted || { echo "not in /proc/mounts after mount"; return 1; }
}
remount_9p() {
  cd / && umount /mnt/9 && mount_9p
}

make_sources() {
  mkdir -p $source_directory
  for size in 0 1 4095 4096 1048576; do
    head -c $size /dev/urandom > $source_directory/f.$size || return 1
  done
  # A small tree for tar: files of several sizes, subdirectories, a symlink, an empty directory.
  mkdir -p /tmp/tree/sub/deeper /tmp/tree/empty
  for index in 1 2 3 4 5 6 7 8; do
    head -c $((index * 1500)) /dev/urandom > /tmp/tree/file$index
    echo "line $index" > /tmp/tree/sub/text$index
  done
  head -c 70000 /dev/urandom > /tmp/tree/sub/deeper/big
  ln -s ../file1 /tmp/tree/sub/link
  chmod 640 /tmp/tree/file2
}

# ---- the steps: each runs in $D, the cache mode's directory on the mount ----
mkdir_p() { mkdir -p $D/a/b/c && [ -d $D/a/b/c ] && mkdir -p $D/a/b/c; }
write_sizes() {
  for size in 0 1 4095 4096 1048576; do
    # One 1 MiB write(2): at msize 1 MiB (mode tcp) it needs two Twrites (iounit msize - 24).
    dd if=$source_directory/f.$size of=$D/f.$size bs=1048576 2>/dev/null || return 1
    cmp $source_directory/f.$size $D/f.$size || return 1
  done
  # Unaligned writes straight to the file: 4096 bytes in 1000-byte blocks.
  dd if=$source_directory/f.4096 of=$D/f.small-blocks bs=1000 2>/dev/null || return 1
  cmp $source_directory/f.4096 $D/f.small-blocks
}
verify_sizes() {
  for size in 0 1 4095 4096 1048576; do
    expect "size of f.$size" "$(stat -c %s $D/f.$size)" $size || return 1
    expect "md5 of f.$size" "$(md5sum < $D/f.$size)" "$(md5sum < $source_directory/f.$size)" || return 1
    cmp $source_directory/f.$size $D/f.$size || return 1
    dd if=$D/f.$size bs=1048576 2>/dev/null | cmp $source_directory/f.$size - || return 1
  done
  echo "md5 $cache/f.1048576 $(md5sum < $D/f.1048576 | cut -d' ' -f1)" > /tmp/md5.$cache
}
ls_la() {
  listing=$(ls -la $D) || return 1
  echo "$listing" | grep -q ' \.$' || { echo "no . in: $listing"; return 1; }
  echo "$listing" | grep -q ' \.\.$' || { echo "no .. in: $listing"; return 1; }
  line=$(echo "$listing" | grep ' f.4096$')
  expect "ls -l of f.4096" "$(echo "$line" | awk '{print $1, $5}')" "-rw-r--r-- 4096" || return 1
  expect "entries" "$(ls -a $D | wc -l)" 9 # . .. a f.0 f.1 f.4095 f.4096 f.1048576 f.small-blocks
}
stat_step() {
  expect "file" "$(stat -c '%s %h %F %a' $D/f.4095)" "4095 1 regular file 644" || return 1
  expect "directory" "$(stat -c '%h %F' $D/a)" "3 directory" || return 1
  expect "inode stable" "$(stat -c %i $D/f.4095)" "$(ls -i $D/f.4095 | awk '{print $1}')" || return 1
  expect "blocks" "$(stat -c %b $D/f.4096)" 8
}
rename_within() { mv $D/f.1 $D/g.1 && [ ! -e $D/f.1 ] && cmp $D/g.1 $source_directory/f.1; }
rename_across() {
  mv $D/g.1 $D/a/b/g.1 && [ ! -e $D/g.1 ] && cmp $D/a/b/g.1 $source_directory/f.1 &&
    mv $D/a/b/g.1 $D/f.1 && cmp $D/f.1 $source_directory/f.1
}
rename_over() {
  echo one > $D/r1 && echo two > $D/r2 && mv -f $D/r1 $D/r2 || return 1
  [ ! -e $D/r1 ] || { echo "r1 still there"; return 1; }
  expect "r2" "$(cat $D/r2)" one || return 1
  rm $D/r2
}
rename_directory() {
  mkdir -p $D/m1/inner && echo x > $D/m1/inner/file && mv $D/m1 $D/a/m2 || return 1
  expect "moved file" "$(cat $D/a/m2/inner/file)" x || return 1
  expect "parent's links" "$(stat -c %h $D/a)" 4 || return 1
  mv $D/a/m2 $D/m1 && [ -d $D/m1/inner ]
}
symlink() {
  ln -s f.4096 $D/s && expect "readlink" "$(readlink $D/s)" f.4096 || return 1
  cmp $D/s $source_directory/f.4096 || return 1
  expect "type" "$(stat -c %F $D/s)" "symbolic link" || return 1
  ln -s ../f.4095 $D/a/up && cmp $D/a/up $source_directory/f.4095 || return 1
  ln -s /no/such/target $D/dangling && expect "dangling" "$(readlink $D/dangling)" /no/such/target
}
hard_link() {
  ln $D/f.4095 $D/h && expect "links" "$(stat -c %h $D/f.4095)" 2 || return 1
  expect "same inode" "$(stat -c %i $D/h)" "$(stat -c %i $D/f.4095)" || return 1
  cmp $D/h $source_directory/f.4095 && rm $D/h && expect "links after rm" "$(stat -c %h $D/f.4095)" 1
}
rm_step() {
  cp $D/f.0 $D/gone && rm $D/gone && [ ! -e $D/gone ] || return 1
  rm $D/dangling $D/a/up && [ ! -e $D/dangling ] || return 1
  rm $D/no-such-file 2>/dev/null && { echo "rm of a missing file succeeded"; return 1; }
  return 0
}
rmdir_nonempty() {
  message=$(rmdir $D/m1 2>&1) && { echo "rmdir of a non-empty directory succeeded"; return 1; }
  echo "$message" | grep -q "not empty" || { echo "not ENOTEMPTY: $message"; return 1; }
  [ -d $D/m1/inner ] || { echo "m1/inner gone"; return 1; }
  rmdir $D/m1/inner 2>&1 && { echo "rmdir of m1/inner, a non-empty directory, succeeded"; return 1; }
  rm $D/m1/inner/file && rmdir $D/m1/inner && rmdir $D/m1 && [ ! -e $D/m1 ]
}
truncate_step() {
  cp $source_directory/f.4096 $D/t && truncate -s 100 $D/t || return 1
  expect "size" "$(stat -c %s $D/t)" 100 || return 1
  head -c 100 $source_directory/f.4096 | cmp - $D/t || return 1
  truncate -s 10000 $D/t && expect "grown" "$(stat -c %s $D/t)" 10000 || return 1
  expect "zeros" "$(tail -c 9900 $D/t | tr -d '\000' | wc -c)" 0 || return 1
  # Opening with O_TRUNC (the shell's >) empties an existing file before the write.
  echo short > $D/t && expect "rewritten by >" "$(cat $D/t) $(stat -c %s $D/t)" "short 6" || return 1
  truncate -s 0 $D/t && expect "empty" "$(stat -c %s $D/t)" 0 && rm $D/t
}
append() {
  echo a > $D/ap && echo b >> $D/ap && echo c >> $D/ap || return 1
  expect "content" "$(cat $D/ap | tr '\n' ,)" "a,b,c," || return 1
  cp $source_directory/f.1048576 $D/big && printf xyz >> $D/big || return 1
  expect "size" "$(stat -c %s $D/big)" 1048579 || return 1
  expect "tail" "$(tail -c 3 $D/big)" xyz && rm $D/big $D/ap
}
touch_d() {
  touch -d '2001-02-03 04:05:06' $D/f.4096 && expect "mtime" "$(stat -c %Y $D/f.4096)" 981173106 || return 1
  touch $D/new-by-touch && [ -f $D/new-by-touch ] || return 1
  now=$(date +%s)
  touch $D/f.4096 && mtime=$(stat -c %Y $D/f.4096) || return 1
  [ $((mtime - now)) -le 60 ] && [ $((now - mtime)) -le 60 ] || { echo "touch gave $mtime at $now"; return 1; }
  rm $D/new-by-touch
}
chmod_step() {
  chmod 600 $D/f.4095 && expect "600" "$(stat -c %a $D/f.4095)" 600 || return 1
  chmod 4751 $D/f.4095 && expect "4751" "$(stat -c %a $D/f.4095)" 4751 || return 1
  chmod 700 $D/a && expect "directory" "$(stat -c %a $D/a)" 700 || return 1
  chmod 755 $D/a && chmod 644 $D/f.4095
}
find_step() {
  expect "files" "$(cd $D && find . -type f | sort | tr '\n' ' ')" \
    "./f.0 ./f.1 ./f.1048576 ./f.4095 ./f.4096 ./f.small-blocks " || return 1
  expect "directories" "$(cd $D && find . -type d | sort | tr '\n' ' ')" ". ./a ./a/b ./a/b/c " || return 1
  expect "symlinks" "$(cd $D && find . -type l)" ./s || return 1
  expect "by name" "$(find $D -name 'f.409*' | wc -l)" 2
}
df_step() {
  df $D || return 1
  expect "df lines" "$(df $D | wc -l)" 2 || return 1
  v9fs-probe statfs $D
}
sync_step() {
  sync $D/f.4096 && sync -d $D/f.4095 && sync && v9fs-probe fsync $D/synced && rm $D/synced
}
tar_step() {
  tar -C /tmp -cf $D/tree.tar tree && mkdir $D/x && tar -C $D/x -xf $D/tree.tar || return 1
  diff -r /tmp/tree $D/x/tree || return 1
  expect "mode kept" "$(stat -c %a $D/x/tree/file2)" 640 || return 1
  expect "symlink kept" "$(readlink $D/x/tree/sub/link)" ../file1 || return 1
  # And back out again: tar reading the mount.
  rm -rf /tmp/copy && mkdir /tmp/copy && tar -C $D/x -cf - tree | tar -C /tmp/copy -xf - || return 1
  diff -r /tmp/tree /tmp/copy/tree && rm $D/tree.tar
}
probes() {
  v9fs-probe lock $D/locked && rm $D/locked || return 1
  v9fs-probe utime $D/times && rm $D/times || return 1
  v9fs-probe append $D/appended && rm $D/appended || return 1
  v9fs-probe unlinked $D || return 1
  v9fs-probe excl $D
}
mmap_step() {
  # cache=none maps files read-only (generic_file_readonly_mmap): a shared writable mapping
  # is refused by the client, so only the caching modes are expected to pass.
  if [ "$cache" != loose ] && [ "$cache" != mmap ]; then
    v9fs-probe mmap $D/mapped 2>&1 && { echo "cache=none took a shared writable mapping"; return 1; }
    rm -f $D/mapped
    return 0
  fi
  v9fs-probe mmap $D/mapped && rm $D/mapped
}
readdir_many() {
  # More entries than one Treaddir carries at this msize: names of about 200 bytes, so 400
  # entries take 90 KB of Rreaddir and the listing needs several.
  prefix=$(printf '%0190d' 0 | tr 0 n)
  mkdir $D/many && cd $D/many || return 1
  seq 1 $MANY_FILES | sed "s/^/$prefix-/" | xargs touch || return 1
  cd /
  expect "listed" "$(ls $D/many | wc -l)" $MANY_FILES || return 1
  expect "unique" "$(ls $D/many | sort -u | wc -l)" $MANY_FILES || return 1
  v9fs-probe seekdir $D/many || return 1
  # Remove while listing: rm -r reads the directory as it empties it.
  rm -r $D/many && [ ! -e $D/many ]
}
parallel() {
  # Several processes at once: requests from the client overlap (tags in flight together).
  for index in 1 2 3 4; do
    dd if=$source_directory/f.1048576 of=$D/parallel.$index bs=65536 2>/dev/null &
    md5sum $D/f.1048576 > /tmp/parallel-md5.$index &
  done
  wait
  expected=$(md5sum < $source_directory/f.1048576 | cut -d' ' -f1)
  for index in 1 2 3 4; do
    cmp $source_directory/f.1048576 $D/parallel.$index || return 1
    expect "md5 read in parallel" "$(cut -d' ' -f1 /tmp/parallel-md5.$index)" "$expected" || return 1
    rm $D/parallel.$index
  done
}
interrupted() {
  # Readers killed in the middle of a request: the client sends Tflush and must get the
  # connection back in a usable state.
  # 4 KiB reads make 256 requests of the 1 MiB file, so a kill lands inside one.
  for index in 1 2 3 4 5 6 7 8 9 10; do
    dd if=$D/f.1048576 of=/dev/null bs=4096 2>/dev/null &
    reader=$!
    sleep 0.0$index
    kill -9 $reader 2>/dev/null
    wait $reader 2>/dev/null
  done
  cmp $source_directory/f.1048576 $D/f.1048576 && ls $D > /dev/null
}
sparse() {
  # A write 10 MiB past the end leaves a hole that reads as zeros.
  dd if=$source_directory/f.4096 of=$D/sparse bs=4096 seek=2560 2>/dev/null || return 1
  expect "size" "$(stat -c %s $D/sparse)" $((2561 * 4096)) || return 1
  expect "hole" "$(head -c 1048576 $D/sparse | tr -d '\000' | wc -c)" 0 || return 1
  tail -c 4096 $D/sparse | cmp - $source_directory/f.4096 && rm $D/sparse
}
names() {
  long=$(printf '%0255d' 0 | tr 0 l)
  touch "$D/$long" && [ -f "$D/$long" ] && rm "$D/$long" || { echo "a 255-byte name"; return 1; }
  message=$(touch "$D/${long}x" 2>&1) && { echo "a 256-byte name was accepted"; return 1; }
  echo "$message" | grep -q "too long" || { echo "256-byte name: $message"; return 1; }
  # (busybox ls prints bytes over 0x7f as '?', so the names are checked by find.)
  touch "$D/with space" "$D/ünïcødé" "$D/-dash" || return 1
  expect "odd names" "$(find $D -name 'with space' -o -name 'ünïcødé' -o -name '-dash' | wc -l)" 3 || return 1
  rm "$D/with space" "$D/ünïcødé" "$D/-dash"
}
chown_step() {
  touch $D/owned && chown 1000:100 $D/owned && expect "owner" "$(stat -c '%u %g' $D/owned)" "1000 100" || return 1
  chgrp 200 $D/owned && expect "group" "$(stat -c '%u %g' $D/owned)" "1000 200" && rm $D/owned
}
rename_errors() {
  mkdir -p $D/ra/inside $D/rb && touch $D/rb/full || return 1
  mv -T $D/ra $D/rb 2>/dev/null && { echo "a directory renamed over a non-empty one"; return 1; }
  mv $D/ra $D/ra/inside/ 2>/dev/null && { echo "a directory moved into itself"; return 1; }
  rm $D/rb/full && mv -T $D/ra $D/rb && [ -d $D/rb/inside ] && [ ! -e $D/ra ] ||
    { echo "rename over an empty directory"; return 1; }
  touch $D/plain && mv -T $D/plain $D/rb 2>/dev/null && { echo "a file renamed over a directory"; return 1; }
  rm -r $D/rb $D/plain
}
many_fids() {
  # cache=loose and mmap keep a fid for every cached dentry: more files than the server's
  # fids per connection, all looked up at once.
  mkdir $D/fids && cd $D/fids && seq 1 $MANY_FIDS | xargs touch || return 1
  cd / && expect "listed with stat" "$(ls -l $D/fids | grep -c '^-')" $MANY_FIDS || return 1
  rm -r $D/fids
}
verify_after_remount() {
  for size in 0 1 4095 4096 1048576; do cmp $source_directory/f.$size $D/f.$size || return 1; done
  diff -r /tmp/tree $D/x/tree || return 1
  expect "symlink" "$(readlink $D/s)" f.4096 || return 1
  expect "mode" "$(stat -c %a $D/f.4095)" 644
}
remove_tree() {
  rm -r $D/x && [ ! -e $D/x ] && rm $D/s && rmdir $D/a/b/c $D/a/b
}
umount_step() { cd / && umount /mnt/9 && ! mounted; }

# ---- the run ----
echo "guest: 9P workload, cache modes: $CACHE_MODES, msize $MSIZE"
mkdir -p /mnt/9 /run
mkfifo /run/9p.to-server /run/9p.from-server
port=$(ls /dev/vport*p1 2>/dev/null | head -n 1)
[ -n "$port" ] || { say "FAIL - setup: no virtio-serial port /dev/vport*p1"; say "DONE 1"; exit 1; }
( cat <&5 > /run/9p.from-server & cat /run/9p.to-server >&5 & wait ) 5<>"$port" &
exec 3<>/run/9p.from-server 4<>/run/9p.to-server
for fifo in /run/9p.from-server /run/9p.to-server; do
  v9fs-probe pipe-size $fifo || { say "FAIL - setup: cannot grow the FIFO buffers"; say "DONE 1"; exit 1; }
done
if [ -n "$TCP_PORT" ]; then
  # QEMU's user network: the guest is 10.0.2.15, the host's loopback is 10.0.2.2.
  ip link set lo up && ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 ||
    { say "FAIL - setup: no network for trans=tcp"; say "DONE 1"; exit 1; }
fi
make_sources || { say "FAIL - setup: making the source files"; say "DONE 1"; exit 1; }
for cache in $CACHE_MODES; do
  D=/mnt/9/$cache
  start=$(cut -d' ' -f1 /proc/uptime)
  step mount mount_9p
  if ! mounted; then fail rest "skipped: not mounted"; continue; fi
  echo "guest: $(grep ' /mnt/9 ' /proc/mounts)"
  mkdir -p $D
  step mkdir_p mkdir_p
  step write_sizes write_sizes
  step remount remount_9p
  step verify_sizes verify_sizes
  step ls_la ls_la
  step stat stat_step
  step rename_within_directory rename_within
  step rename_across_directories rename_across
  step rename_over_existing rename_over
  step rename_directory rename_directory
  step symlink_readlink symlink
  step hard_link hard_link
  step rm rm_step
  step rmdir_nonempty_ENOTEMPTY rmdir_nonempty
  step truncate truncate_step
  step append append
  step touch_d touch_d
  step chmod chmod_step
  step find find_step
  step df_statfs df_step
  step sync_fsync sync_step
  step tar_extract_diff tar_step
  step probes_lock_utime_append_unlinked_excl probes
  step mmap mmap_step
  step readdir_many readdir_many
  step parallel_writers_readers parallel
  step interrupted_readers_Tflush interrupted
  step sparse_write sparse
  step names_255_bytes_and_odd names
  step chown chown_step
  step rename_errors rename_errors
  [ "$cache" = loose ] && step many_fids many_fids
  step remount_again remount_9p
  step verify_after_remount verify_after_remount
  step rm_r_tree remove_tree
  step umount umount_step
  echo "guest: cache=$cache took $(awk -v start=$start '{ printf "%.0f", $1 - start }' /proc/uptime) s"
done
cat /tmp/md5.* 2>/dev/null | sed 's/^/GUEST /'
say "DONE $failures"
