/* A cold-start cache test for the simulated D1/LL: a static program with
 * no C library, so that the traced function `work` makes every data
 * access of the run. _start jumps (no call, no stack write) into work,
 * which exits with a system call instead of returning: cachegrind's
 * counts for the whole run are then exactly work's, and its caches start
 * as cold as linetrace's simulation.
 *
 * Each iteration makes, from a 64-bit LCG: an unaligned 8-byte read
 * (some straddle two lines), an unaligned 16-byte read, a 4-byte write, a
 * read-modify-write, and a read of a 64-byte-strided sweep (conflict
 * misses in a small D1). Build: gcc -nostdlib -static -g cache_mix.S
 * Argument: none; ITERATIONS below sets the length. */

#define ITERATIONS 6000

        .section .bss
        .balign 4096
buf:    .skip 65536 + 128

        .text
        .globl _start
_start:
        jmp work

        .globl work
        .type work, @function
work:
        lea buf(%rip), %rbx
        mov $12345, %r8
        movabs $6364136223846793005, %r9
        movabs $1442695040888963407, %r10
        mov $ITERATIONS, %rcx
1:
        imul %r9, %r8
        add %r10, %r8
        /* unaligned 8-byte read in the first 8 KiB */
        mov %r8, %rax
        shr $40, %rax
        and $8191, %rax
        mov (%rbx,%rax), %rdx
        /* unaligned 16-byte read in the first 16 KiB */
        mov %r8, %rax
        shr $24, %rax
        and $16383, %rax
        movdqu (%rbx,%rax), %xmm0
        /* 4-byte write in the first 8 KiB */
        mov %r8, %rsi
        shr $20, %rsi
        and $2047, %rsi
        mov %edx, (%rbx,%rsi,4)
        /* read-modify-write of an aligned 8-byte word in the first 4 KiB */
        mov %r8, %rdi
        shr $50, %rdi
        and $511, %rdi
        addq $1, (%rbx,%rdi,8)
        /* strided sweep: line (i mod 1024) of the buffer */
        mov %rcx, %r11
        and $1023, %r11
        shl $6, %r11
        mov (%rbx,%r11), %rax
        dec %rcx
        jnz 1b
        mov $60, %eax
        xor %edi, %edi
        syscall
        .size work, . - work
