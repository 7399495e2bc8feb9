#!/bin/bash
# tests/emulator/run.sh - build tests/emulator's bare-metal AMX check and
# run it on Bochs' emulated Sapphire Rapids (README.md: why, and what it
# needs). Usage, from the repository root:
#   BOCHS=/path/to/bochs BOCHS_BIOS=/path/to/bochs/bios tests/emulator/run.sh
# Needs gcc, binutils, syslinux (its mboot.c32), mtools and dosfstools.
# Prints the check's report; exits 0 when it ends in AMX_CHECK PASS.
set -euo pipefail
: "${BOCHS:?set BOCHS to a bochs binary built with AMX}"
: "${BOCHS_BIOS:?set BOCHS_BIOS to its bios/ directory}"
MODEL=${BOCHS_CPU:-sapphire_rapids}
TIMEOUT=${TIMEOUT:-600}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d "${TMPDIR:-/tmp}/qw-emulator.XXXXXX")
SYSLINUX=/usr/lib/syslinux/modules/bios
for tool in syslinux mcopy mkfs.fat; do
    command -v $tool >/dev/null || { echo "run.sh: $tool missing (apt-get install syslinux syslinux-common mtools dosfstools)"; exit 2; }
done

# freestanding: no C library, no red zone (no interrupts either, but the
# stub stays safe), no stack protector or CET notes; -ffp-contract=off as
# the library is built, so the chain kernel keeps its bits
CF="-std=c11 -D_GNU_SOURCE -O2 -ffp-contract=off -fno-pic -fno-pie -mno-red-zone
    -fno-stack-protector -fno-asynchronous-unwind-tables -fcf-protection=none
    -I$ROOT/include -iquote $ROOT/lib"
gcc $CF -c "$ROOT/tests/emulator/boot.S" -o "$W/boot.o"
gcc $CF -ffreestanding -fno-tree-loop-distribute-patterns -c "$ROOT/tests/emulator/amx_check.c" -o "$W/amx_check.o"
for f in pair_amx kernels_bf16dot pairpanel; do
    gcc $CF -c "$ROOT/lib/cpu/$f.c" -o "$W/$f.o"
done
ld --no-warn-rwx-segments -nostdlib -static -T "$ROOT/tests/emulator/link.ld" -o "$W/amx_check.elf" "$W"/*.o \
    "$(gcc -print-libgcc-file-name)"
objcopy -O binary "$W/amx_check.elf" "$W/amx_check.bin"

# a FAT disk whose boot sector is syslinux's; mboot.c32 loads the image
truncate -s 67092480 "$W/disk.img"   # 130 cylinders x 16 heads x 63 sectors
mkfs.fat -F 16 "$W/disk.img" >/dev/null
printf 'DEFAULT c\nPROMPT 0\nLABEL c\n  KERNEL mboot.c32\n  APPEND amx_check.bin\n' > "$W/syslinux.cfg"
mcopy -i "$W/disk.img" "$W/syslinux.cfg" ::syslinux.cfg
mcopy -i "$W/disk.img" $SYSLINUX/mboot.c32 $SYSLINUX/libcom32.c32 "$W/amx_check.bin" ::
syslinux --install "$W/disk.img"
cat > "$W/bochsrc" <<EOC
megs: 256
cpu: model=$MODEL
romimage: file=$BOCHS_BIOS/BIOS-bochs-latest
vgaromimage: file=$BOCHS_BIOS/VGABIOS-lgpl/VGABIOS-lgpl-latest.bin
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
    grep -q "AMX_CHECK DONE" "$W/e9.log" 2>/dev/null && break
    # a fault triple-faults (no IDT): the emulator resets and boots again
    [ "$(grep -c 'cpu hardware reset' "$W/bochs.log" 2>/dev/null)" -gt 1 ] && { echo "run.sh: the CPU reset (a fault): see $W/bochs.log"; break; }
    kill -0 $pid 2>/dev/null || break
done
kill $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
grep -a -E "^(amx_check|M=|bias|peak|shapes|AMX_CHECK)" "$W/e9.log" | grep -v "AMX_CHECK DONE" || true
echo "run.sh: logs in $W"
grep -q "AMX_CHECK PASS" "$W/e9.log"
