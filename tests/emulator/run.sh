#!/bin/bash
# tests/emulator/run.sh - build one of tests/emulator's bare-metal checks
# and run it on an emulated CPU in Bochs (README.md: why, and what each
# check covers). Usage, from the repository root:
#   BOCHS=/path/to/bochs BOCHS_BIOS=/path/to/bochs/bios tests/emulator/run.sh amx|q4i
# amx: the amx table's matmul_pair on Bochs' sapphire_rapids model;
# q4i: the avx2 table's AVX-VNNI int4/int8 matmul on its arrow_lake model
# (BOCHS_CPU picks another model). Needs gcc, binutils, syslinux (its
# mboot.c32), mtools and dosfstools. Prints the check's report; exits 0
# when it ends in <CHECK>_CHECK PASS.
set -euo pipefail
CHECK=${1:-amx}
: "${BOCHS:?set BOCHS to a bochs binary built with AVX, EVEX and AMX}"
: "${BOCHS_BIOS:?set BOCHS_BIOS to its bios/ directory}"
case $CHECK in
amx) MODEL=${BOCHS_CPU:-sapphire_rapids}; LIBSRC="pair_amx kernels_bf16dot pairpanel" ;;
q4i) MODEL=${BOCHS_CPU:-arrow_lake}; LIBSRC="q4i q4i_x86 q4i_avxvnni qpanel gemv_prefetch" ;;
*) echo "run.sh: unknown check '$CHECK' (amx or q4i)"; exit 2 ;;
esac
MARK=$(echo "$CHECK" | tr a-z A-Z)_CHECK
TIMEOUT=${TIMEOUT:-900}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d "${TMPDIR:-/tmp}/qw-emulator.XXXXXX")
SYSLINUX=/usr/lib/syslinux/modules/bios
for tool in syslinux mcopy mkfs.fat; do
    command -v $tool >/dev/null || { echo "run.sh: $tool missing (apt-get install syslinux syslinux-common mtools dosfstools)"; exit 2; }
done
VGAROM=$BOCHS_BIOS/VGABIOS-lgpl/VGABIOS-lgpl-latest.bin   # the layout after Bochs 3.0
[ -f "$VGAROM" ] || VGAROM=$BOCHS_BIOS/VGABIOS-lgpl-latest.bin

# freestanding: no C library, no red zone, no stack protector or CET
# notes; -ffp-contract=off as the library is built, so each kernel keeps
# its bits. The check and bare.c must not have their loops turned into
# calls of the memcpy/memset they define.
CF="-std=c11 -D_GNU_SOURCE -O2 -ffp-contract=off -fno-pic -fno-pie -mno-red-zone
    -fno-stack-protector -fno-asynchronous-unwind-tables -fcf-protection=none
    -I$ROOT/include -iquote $ROOT/lib"
E=$ROOT/tests/emulator
gcc $CF -c "$E/boot.S" -o "$W/boot.o"
for f in bare ${CHECK}_check; do
    gcc $CF -ffreestanding -fno-tree-loop-distribute-patterns -c "$E/$f.c" -o "$W/$f.o"
done
for f in $LIBSRC; do
    gcc $CF -c "$ROOT/lib/cpu/$f.c" -o "$W/lib_$f.o"
done
ld --no-warn-rwx-segments -nostdlib -static -T "$E/link.ld" -o "$W/check.elf" "$W"/*.o \
    "$(gcc -print-libgcc-file-name)"
objcopy -O binary "$W/check.elf" "$W/check.bin"

# a FAT disk whose boot sector is syslinux's; mboot.c32 loads the image
truncate -s 67092480 "$W/disk.img"   # 130 cylinders x 16 heads x 63 sectors
mkfs.fat -F 16 "$W/disk.img" >/dev/null
printf 'DEFAULT c\nPROMPT 0\nLABEL c\n  KERNEL mboot.c32\n  APPEND check.bin\n' > "$W/syslinux.cfg"
mcopy -i "$W/disk.img" "$W/syslinux.cfg" ::syslinux.cfg
mcopy -i "$W/disk.img" $SYSLINUX/mboot.c32 $SYSLINUX/libcom32.c32 "$W/check.bin" ::
syslinux --install "$W/disk.img"
cat > "$W/bochsrc" <<EOC
megs: 256
cpu: model=$MODEL
romimage: file=$BOCHS_BIOS/BIOS-bochs-latest
vgaromimage: file=$VGAROM
display_library: nogui
ata0-master: type=disk, path=$W/disk.img, mode=flat, cylinders=130, heads=16, spt=63
boot: disk
com1: enabled=1, mode=file, dev=$W/serial.log
port_e9_hack: enabled=1
log: $W/bochs.log
clock: sync=none
EOC
(cd "$W" && exec timeout "$TIMEOUT" "$BOCHS" -q -f bochsrc >"$W/e9.log" 2>&1) &
pid=$!
for _ in $(seq 1 "$TIMEOUT"); do
    sleep 1
    grep -q "$MARK DONE" "$W/e9.log" 2>/dev/null && break
    # a fault triple-faults (no IDT): the emulator resets and boots again
    [ "$(grep -c 'cpu hardware reset' "$W/bochs.log" 2>/dev/null)" -gt 1 ] && { echo "run.sh: the CPU reset (a fault): see $W/bochs.log"; break; }
    kill -0 $pid 2>/dev/null || break
done
kill $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
grep -a -E "^(${CHECK}_check|M=|MISMATCH|bias|peak|shapes|cases|qwi_fail|$MARK)" "$W/e9.log" | grep -v "$MARK DONE" || true
echo "run.sh: $CHECK on $MODEL; logs in $W"
grep -q "$MARK PASS" "$W/e9.log"
