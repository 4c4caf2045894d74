/*
 * Minimal bcryptprimitives.dll for running Rust test binaries under wine.
 *
 * Rust >= 1.78 seeds its hash maps and `getrandom` through ProcessPrng, which
 * Windows 10+ exports from bcryptprimitives.dll. Debian's wine 8.0 ships no such
 * DLL, so every Rust binary fails to load. This test-only shim exports
 * ProcessPrng and forwards it to advapi32's SystemFunction036 (RtlGenRandom),
 * which wine implements on top of the host's random source.
 *
 * Never ship this DLL: it exists only inside the wine prefix used by tests.
 */
#include <windows.h>

/* RtlGenRandom: BOOLEAN SystemFunction036(PVOID RandomBuffer, ULONG RandomBufferLength). */
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

/*
 * BOOL ProcessPrng(PBYTE pbData, SIZE_T cbData): documented to always return TRUE.
 * SIZE_T is wider than RtlGenRandom's ULONG length, so large requests are chunked.
 */
BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length)
{
    const SIZE_T chunk_max = 0x40000000; /* 1 GiB per call, well under ULONG_MAX */

    while (length > 0) {
        ULONG chunk = (ULONG)(length < chunk_max ? length : chunk_max);
        if (!SystemFunction036(data, chunk)) {
            /* The real ProcessPrng cannot fail; a failure here means the prefix is broken. */
            ExitProcess(0xC0000001u /* STATUS_UNSUCCESSFUL */);
        }
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}

BOOL WINAPI DllMain(HINSTANCE instance, DWORD reason, LPVOID reserved)
{
    (void)instance;
    (void)reason;
    (void)reserved;
    return TRUE;
}
