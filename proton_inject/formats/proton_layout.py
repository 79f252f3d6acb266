"""The per-CTA block Proton's lowering writes: the raw ``.bin`` of a launch, as
``analyze/decode.py`` reads it. (The direct lowering's own block is ``direct_layout.py``.)

Buffer layout (Triton 3.6.0, circular strategy; checked against the lowering source,
by compiling instrumented kernels for ``cuda:90`` on a CPU and against real H100 buffers)
---------------------------------------------------------------------------------------
The profile scratch buffer holds one block of ``bytes_per_cta`` bytes per CTA, in CTA order
(``bytes_per_cta`` is the kernel's ``profile_scratch_size``: header + counts + data, rounded up
to 128). All words are little-endian uint32::

    word 0        preamble 0xdeadbeef (written at kernel entry by thread 0)
    word 1        linear program id  (x + y*gx + z*gx*gy)
    word 2        SM id (%smid)
    word 3        data bytes per CTA (all segments), written at finalize
    words 4-5     init time        (%globaltimer ns, uint64, kernel entry)
    words 6-7     pre-final time   (globaltimer, after the barrier that ends the kernel)
    words 8-9     post-final time  (globaltimer, after the buffer was copied out)
    words 10..    one word per warp of the CTA (all warps, warp_specialize partitions
                  included): words that warp WROTE, i.e. 2 x records, never wrapped
    then          data: one segment per profiled warp (all warps, or the sorted
                  selected ids of selective sampling), each data_bytes / n_segments
                  bytes = a power-of-two number of 8-byte record slots

The layout does not depend on Proton's buffer type. With ``buffer_type=shared`` the records live
in shared memory while the kernel runs and each warp copies its segment out at the end;
with ``global`` the warps store them directly at the same scratch offsets (data starts at
byte 40 + 4 x warps) and nothing is copied. The header and count words are written the same
way in both cases (checked in the LLVM IR of both builds of one kernel).

A warp writes record ``k`` (0-based) into slot ``k mod slots`` of its segment; at the end
the segment is copied out in slot order. When a warp wrote more records than slots, the
buffer wrapped: the newest ``slots`` records survive and the oldest sits in slot
``written mod slots``. A record is two words::

    tag   bit 31 end (1) / start (0); bits 30-23 scope id; bits 22-11 zero;
          bits 10-0 clock bits 42-32 (clock64) or zero (clock32)
    low   clock bits 31-0

so clocks are 43-bit (clock64) or 32-bit (clock32) per-SM cycle counters. Scope ids come
from Proton's scope analysis: one id per start/end PAIR in walk order of the function (a name
used for two pairs gets two ids), which is what
``triton._C.libtriton.proton.get_scope_id_names(module)`` returns.
"""

PREAMBLE = 0xDEADBEEF
HEADER_WORDS = 10
RECORD_BYTES = 8
