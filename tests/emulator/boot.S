/*
 * boot.S - the bare-metal start of tests/emulator's checks: a Multiboot
 * image (address kludge, so a loader needs no ELF64 support; syslinux's
 * mboot.c32 loads it) that enters in 32-bit protected mode, identity-maps
 * the first 4 GiB with 2 MiB pages, switches to long mode, enables the
 * x87/SSE/AVX/AVX-512/AMX state the CPU supports (XCR0 = CPUID 0xD's
 * supported bits & 0x600e7) and calls cmain(). No interrupts, no IDT: a
 * fault ends in a triple fault, which the emulator reports as a reset.
 */
    .set MB_MAGIC, 0x1BADB002
    .set MB_FLAGS, (1<<16)
    .section .multiboot, "a"
    .align 4
mbh:
    .long MB_MAGIC, MB_FLAGS, -(MB_MAGIC + MB_FLAGS)
    .long mbh, _load_start, _load_end, _bss_end, start32

    .section .text32, "ax"
    .code32
    .globl start32
start32:
    cli
    cld
    mov $_load_end, %edi      /* zero .bss ourselves: not every loader does */
    mov $_bss_end, %ecx
    sub %edi, %ecx
    xor %eax, %eax
    rep stosb
    mov $stack_top, %esp
    /* page tables: PML4[0] -> PDPT; PDPT[0..3] -> PD0..3; 2 MiB pages identity, 4 GiB */
    mov $pdpt, %eax
    or $3, %eax
    mov %eax, pml4
    mov $0, %ecx
1:  mov %ecx, %eax
    shl $12, %eax
    add $pd, %eax
    or $3, %eax
    mov %eax, pdpt(,%ecx,8)
    inc %ecx
    cmp $4, %ecx
    jne 1b
    mov $0, %ecx
2:  mov %ecx, %eax
    shl $21, %eax
    or $0x83, %eax
    mov %eax, pd(,%ecx,8)
    mov %ecx, %edx
    shr $11, %edx
    mov %edx, pd+4(,%ecx,8)
    inc %ecx
    cmp $2048, %ecx
    jne 2b
    mov $pml4, %eax
    mov %eax, %cr3
    mov %cr4, %eax
    or $((1<<5)|(1<<9)|(1<<10)|(1<<18)), %eax   /* PAE OSFXSR OSXMMEXCPT OSXSAVE */
    mov %eax, %cr4
    mov $0xC0000080, %ecx
    rdmsr
    or $(1<<8), %eax
    wrmsr
    mov %cr0, %eax
    and $~(1<<2), %eax        /* EM off */
    or $((1<<31)|(1<<1)), %eax  /* PG, MP */
    mov %eax, %cr0
    lgdt gdtr
    ljmp $0x08, $start64

    .code64
start64:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov $stack_top, %rsp
    /* XCR0 = supported & (x87 SSE AVX opmask ZMM_Hi256 Hi16_ZMM TILECFG TILEDATA) */
    mov $0xd, %eax
    xor %ecx, %ecx
    cpuid
    and $0x600e7, %eax
    xor %edx, %edx
    xor %ecx, %ecx
    xsetbv
    call cmain
3:  hlt
    jmp 3b

    .section .data
    .align 16
gdt:
    .quad 0
    .quad 0x00af9a000000ffff   /* 64-bit code */
    .quad 0x00cf92000000ffff   /* data */
gdtr:
    .word gdtr - gdt - 1
    .long gdt

    .section .note.GNU-stack, "", @progbits
    .section .bss
    .align 4096
pml4: .skip 4096
pdpt: .skip 4096
pd:   .skip 4096*4
    .skip 1<<20
stack_top:
