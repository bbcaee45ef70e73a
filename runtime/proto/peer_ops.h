/* acx's own collectives between the executors of one node (issue 17), the executor protocol: op
 * codes ACXP_OP_FIRST..ACXP_OP_LAST (runtime/proto/limits.h) and the host region a coll shares
 * with its executor for them. Plain data: the rank side (collectives/peer_coll.c) writes it, the
 * extension "peer" (kernels/peer/peer_exec.c, and the CUDA kernel in kernels/peer/peer_kernels.cu)
 * reads it.
 *
 * The one-shot all-reduce. Every rank of the set owns a shareable buffer, its "area", that every
 * other rank's executor maps (CUDA IPC; host kind: a memfd): ACXP_FLAG_BYTES of flags, then two
 * data slots of slot_bytes each. Operation number s (1, 2, ... in submission order, the same on
 * every rank) uses slot s % 2 and, split into at most ACXP_MAX_BLOCKS blocks of elements, each
 * block b of rank r
 *   1. copies its elements of the input into slot s % 2 of r's own area;
 *   2. makes them visible (a system-scope release), then writes s into flag [r][b] of every peer's
 *      area;
 *   3. waits until flag [p][b] of its own area is >= s for every peer p (the peers' block b has
 *      its data in place), or the deadline, or the abort word;
 *   4. reduces its elements over the areas of ranks 0, 1, ..., n-1 in that order into the output.
 * Every rank reduces the same values in the same order with the same arithmetic: the results are
 * bit-identical on every rank and from run to run. A slot is written again two operations later;
 * by then every peer has signalled operation s + 1, which it does only after its operation s (and
 * with it every read of slot s % 2) has finished: two slots suffice. The argument holds per block
 * (block b writes and reads only block b's elements of every slot, and waits only for the peers'
 * blocks b), so on GPUs a batch of one-shots of one count runs in one launch, each block going on
 * to the next operation as soon as it has its own part of this one (below).
 *
 * Arithmetic: integers wrap (sum, prod) as NCCL's do; avg is the sum divided by n, truncating for
 * integers as NCCL does; f16 and bf16 accumulate in f32 and round once; f32 and f64 accumulate in
 * their own type. Floating-point avg divides the sum by n (NCCL multiplies each input by 1/n
 * first, so float avg may differ from NCCL's in the last bit). */
#ifndef ACXP_PEER_OPS_H
#define ACXP_PEER_OPS_H

#include <stdint.h>

#define ACXP_MAX_RANKS 16    /* ranks of one set (the ranks of one node) */
#define ACXP_MAX_BLOCKS 32   /* blocks (CUDA thread blocks; the host kind uses one) per operation */
#define ACXP_FLAG_BYTES 4096 /* flags: uint64_t [ACXP_MAX_RANKS][ACXP_MAX_BLOCKS] */
#define ACXP_PENDING 256     /* operations of one set in flight in the executor */

/* Byte offset of flag [from][block] in an area, of data slot k. */
#define ACXP_FLAG_OFF(from, block) ((uint64_t)(((from) * ACXP_MAX_BLOCKS + (block)) * 8))
#define ACXP_SLOT_OFF(k, slot_bytes) ((uint64_t)ACXP_FLAG_BYTES + (uint64_t)(k) * (slot_bytes))

/* The small-message variant: for an all-reduce of at most the set's ll_bytes (<= ACXP_LL_MAX),
 * each rank *pushes* its input into every peer's area, in 16-byte lines of {4 data bytes, s, 4
 * data bytes, s} (s: the operation's flag, below; as NCCL's LL protocol does), each line one store
 * on a GPU (each half an 8-byte atomic store on the host kind); the receiver polls the lines in its
 * own area until both halves carry s, then reduces over ranks 0..n-1 in that order, as above. On
 * GPUs one NVLink latency instead of two (no flag after the data, no remote read) and no
 * system-scope fence: a half line is written whole, so its flag says its data is there. Lines from rank q for
 * operation s sit at ACXP_LL_OFF(s % 2, q, slot_bytes) + 16 * line of the receiver's area; they
 * are rewritten by operation s + 2, which q starts only after its operation s + 1, which needs
 * this rank's pushes of s + 1, which it makes only after its operation s has finished: two
 * parities suffice. A line's flag is s mod (2^32 - 1) + 1, never 0, and a line carries the flag
 * waited for only when it was written for this operation, however long the set runs: on the host
 * kind the receiver clears each line once it has read it; on GPUs the executor clears the lines of
 * parity s % 2 in its own area (from every source) after operation s and before s + 1, for the two
 * operations at the start of every ACX_COLL_PEER_LL_CLEAR (2^30): the peers write that parity
 * again only for s + 2, after this rank's s + 1, so nothing new is lost, and every line older than
 * its parity's last clearing is gone, so a line that is there was written within the last 2^30 + 2
 * operations, whose flags all differ. (The one-shot's flags above are 64-bit and only grow: a
 * block left unused for 2^31 operations can never look ready.)
 *
 * On GPUs operations up to a slot sent back to back run in batches, several per kernel launch one
 * after the other (ACX_COLL_PEER_BATCH; the one-shots' and the one-shots with groups' too, since
 * session 26: their reuse arguments hold per block, whose elements are the same in every operation
 * of one count): each thread of the push-line kernel owns one line index in every
 * operation of the batch and goes on to the next operation once it has its own output, so the
 * executor batches only operations of one dtype, op, count and stream whose buffers are the same
 * as or disjoint from those the batch's earlier operations write (and read, for its writes): a
 * byte is then read and written by one thread only, in order. The argument above holds per line:
 * the peers' line for s + 2 comes only after this thread's push of s + 1, which it makes after
 * reading s, because s + 1 uses the line too (one count); where counts change, operations of
 * different counts are in different launches on every rank and the argument is the one above. (A
 * first version batched different counts: a line that s + 1 does not use let a peer's s + 2 land
 * before this rank had read s, and the wait timed out; test_back_to_back caught it on a GPU.) A
 * rank's batching is its own: the peers need not batch alike. */
/* Push lines with groups (issue 16, session 22; acxp_ctl_t's ll_groups): where the set has groups,
 * an all-reduce of L lines is cut into K slices of ceil(L / K) lines (slice js from line
 * js * ceil(L / K), the last ones short or empty), and the line of each thread, in slice js:
 *   1. goes to its group's rank at place js (within the GPU), unless that is this rank;
 *   2. where js is this rank's place: the group's lines are summed in place order (a partial sum:
 *      avg not divided, f16/bf16 rounded to the type) and the sum's line pushed to every rank;
 *   3. the groups' partial sums of the line (from the ranks at place js, in group order) are
 *      reduced into the output.
 * A source writes each line of a receiver at most once per operation (a rank's input lines go to
 * the rank at their slice's place, its partial lines are of its own slice), so the layout and the
 * clearing are the lines' above. Reuse, per line: a peer's line for s + 2 comes after that peer has
 * read a line of s + 1 that this rank's thread (or, in step 3, the rank at the line's place, after
 * reading this rank's line of s + 1) sent after reading s; and every rank's operation s + 1 needs
 * a line from every rank (step 3 from each group's rank at the line's place, step 2 from its group),
 * so operations of different counts, in different launches, are ordered by the launches. Each GPU's
 * link carries K (G - 1) partial lines of a slice per rank instead of K (G - 1) whole inputs; the
 * results are those of the two-shot with groups (group sums in place order, then the groups in
 * order), bit-identical on every rank. */
#define ACXP_LL_MAX 131072                      /* data bytes of the largest such all-reduce (the set's
                                                   ll_bytes: ACX_COLL_PEER_LL_KB, 64 KiB by default) */
#define ACXP_LL_SRC_BYTES (2 * ACXP_LL_MAX)     /* one source's lines */
#define ACXP_LL_OFF(parity, from, slot_bytes) \
  (ACXP_SLOT_OFF(2, slot_bytes) + (uint64_t)((parity) * ACXP_MAX_RANKS + (from)) * ACXP_LL_SRC_BYTES)
#define ACXP_AREA_BYTES(slot_bytes) ACXP_LL_OFF(2, 0, slot_bytes) /* flags, two slots, the lines */
#define ACXP_LL_REGION_BYTES ((uint64_t)2 * ACXP_MAX_RANKS * ACXP_LL_SRC_BYTES)

/* The large-message variant (two-shot), for all-reduces larger than a slot when the set has big
 * slots (big_bytes > 0; off by default): after the lines, two flag arrays of ACXP_BIG_FLAG_BYTES
 * (phase 0 and phase 1, uint64_t [from][block] each, room for ACXP_BIG_MAX_BLOCKS blocks; a GPU
 * runs the set's big_blocks), then two big slots of big_bytes, each cut in a first and a second
 * half. The data go in chunks of ACXP_BIG_CHUNK elements (a multiple of n 16-byte vectors that
 * fits half a slot); chunk t uses big slot t % 2. Every chunk is cut alike on every rank into n
 * parts of pp = ACXP_BIG_PART(m0, n, 16 / element size) elements, m0 the operation's first chunk
 * (its count, or a whole chunk): part q from q * pp, owned by rank q, the last parts of a short
 * last chunk shorter or empty; every part into the operation's blocks alike (pieces of
 * ceil(pp / blocks) rounded to whole vectors; the host kind has one block); block b of rank r, for
 * each chunk t:
 *   1. stores its piece of every peer q's part of the input into q's first half, at r * pp plus
 *      the piece's offset in the part;
 *   2. raises its phase-0 flag [r][b] to V(s, t) in every peer's area (release), waits for the
 *      peers' phase-0 flags [p][b] >= V(s, t) in its own (acquire);
 *   3. reduces its piece of part r over ranks 0..n-1 in that order (its own input, the others
 *      from its first half) into the output and every peer's second half, at the piece's offset
 *      in the chunk;
 *   4. raises its phase-1 flag to V(s, t) everywhere, waits for the peers' (their pieces stored);
 *   5. copies the peers' reduced pieces from its own second half into the output.
 * Only stores cross between ranks (on 4xH200 from 64 MiB to 1 GiB a version that loaded the peers'
 * parts from their slots ran at 0.80-1.08x NCCL's busbw, this one at 0.98-1.27x: docs/benchmark.md).
 * V(s, t) = s * 2^32 + t + 1 only grows. A peer stores into this rank's first half for a chunk
 * only after phase 1 of the chunk before it (in this operation or the set's previous one), which
 * this rank raises after its step 3 of that chunk, and so after reading the half for the chunk
 * two before; into its second half only after phase 0 of the chunk, which this rank raises after
 * its step 5 of the chunks before. Two big slots suffice, per block (block b only ever reads
 * pieces that the peers' blocks b wrote, and writes only where the peers' blocks b read before),
 * with no closing round; that holds because every chunk of an operation has the same parts and
 * pieces (a short last chunk's clipped): cut by its own size, a short chunk's pieces of block b
 * overlapped other blocks' pieces of the chunk two before, which those blocks of the peer could
 * still be reading (wrong values across 2xH100 with 128 blocks, session 22). Between operations
 * the kernels' order on each GPU separates the layouts. Each element is reduced once,
 * by its part's owner, in rank order: the results are bit-identical on every rank, as the
 * one-shot's, and each rank sends 2 (n - 1) / n of the data over the links, as a ring does. */
/* The two-shot with groups (issue 16: ranks that share a GPU). Where the set's ranks form G groups
 * of K > 1 ranks each (the ranks of one GPU; acxp_ctl_t's groups, per_group, grp, lane, at), every
 * byte crosses between GPUs once each way, as with one rank per GPU, instead of once per rank: the
 * ranks of a group sum their parts on their GPU first. Parts, pieces, chunks, big slots and flag
 * values are as above; rank r = at[g * K + j] is in group g at place j (its lane), and part q's
 * lane is lane[q]. In rank x's first half, the pieces sent by its group's rank at place jl for
 * group gq's rank at place lane[x] (the "proxy" x stands for) sit at slot jl * G + gq, and the
 * partial sum that group gq's proxy sends for x's own part at slot lane[x] * G + gq (offset
 * slot * pp plus the piece's offset in its part: n slots, as before). Block b of rank r, per chunk:
 *   1. (within the GPU) for every other rank l of its group and every group gq: stores its piece
 *      of the part of at[gq * K + lane[l]] into l's first half, at slot lane[r] * G + gq;
 *   2. A: raises its phase-0 flag in its group's areas, waits for its group's;
 *   3. (across GPUs) for every other group gq: sums its piece of the part of q = at[gq * K + lane[r]]
 *      over its group in place order (its own input at its place, the others from its first half),
 *      and stores that partial sum into q's first half at slot lane[r] * G + grp[r];
 *   4. B: raises its phase-0 flag in the areas of its lane's ranks (at[gq * K + lane[r]]), waits
 *      for theirs (group and lane peers are disjoint, so one flag array serves A and B);
 *   5. reduces its piece of part r over the groups in order, each group's partial sum in place
 *      order (its own group's from its input and first half, as in 3.; f16/bf16 partial sums are
 *      rounded to the type, each group's alike), into the output, its own second half and its lane
 *      ranks' second halves;
 *   6. C: raises its phase-1 flag in its lane's areas, waits for theirs: its second half now has
 *      every part of its lane (the other groups' parts at its place);
 *   7. copies those from its second half into its output (and, below, its group's registered
 *      outputs), then D: raises its phase-1 flag in its group's areas, waits for theirs;
 *   8. copies every other part's piece not of its lane into the output from the second half of its
 *      group's rank at that part's place (a group peer's on the same GPU: a load, but not across
 *      GPUs).
 * Pipelined (session 28): steps 7 and 8 of chunk t run inside chunk t + 1, step 7's copies in the
 * same loop as step 3's partial sums (stores within the GPU beside stores across the link, which
 * had the link idle during a step of their own), then D of t raised with B of t + 1 and both
 * awaited, then step 8 of t, then step 5 of t + 1; after the last chunk, its steps 7 and 8. So per
 * chunk t: 1, A, 3 + 7(t - 1), D(t - 1) + B, 8(t - 1), 5, C. No wait can deadlock: each round is
 * between peers that all reach it (A, D + B, C in every chunk, D after the last), each raises its
 * flag before it waits, and nothing a round waits for is raised later than that round by anyone.
 * In place, step 7's stores into the output land on elements of the input that only r reads (its
 * group's partial sums of its lane's parts, step 3 of t, before C of t).
 * Reuse of the halves two chunks later. r reads its first half for t in steps 3 and 5 of t, its
 * second half in step 7 of t (inside t + 1); its group peers read r's second half in step 8 of t
 * (inside t + 1). A group peer stores into r's first half for t + 2 (step 1) after its A of t + 1,
 * which r raises after its step 5 of t; a lane peer (step 3 of t + 2) after its B of t + 1, which r
 * raises after step 3 of t + 1, after its step 5 of t; a lane peer stores into r's second half for
 * t + 2 (step 5) after its B of t + 2, which r raises after its step 7 of t (inside t + 1) and
 * after its A of t + 2, which r's group peers raise after their step 8 of t (inside t + 1); r
 * itself stores there again in step 5 of t + 2, after the same. Between operations the kernels'
 * order on each GPU keeps these (a rank's kernel ends after its D of the last chunk from its
 * group and its C from its lane). Each element is still reduced once, by its part's owner: results
 * are bit-identical on every rank; the order is (group 0's ranks in place order) then group 1's
 * partial, and so on, and for f16/bf16 each group's sum is rounded once. With K = 1 (G = n) steps 1,
 * 2, D and 8 are empty, the partial sum is the input, nothing is pipelined (the flat two-shot's
 * kernel keeps its order), and this is the protocol above. */
/* The one-shot with groups (issue 16, session 22; acxp_ctl_t's small_groups): where the set has
 * groups, the all-reduces above ll_bytes, up to a slot and of at least small_groups bytes (the
 * same choice on every rank: it depends on the count only) cross between GPUs once per group
 * instead of once per rank (the plain one-shot has every rank load every rank's slot: K^2 (G - 1)
 * slots over each GPU's link, 2.3x the time of one rank per GPU at 128 KiB and 4 ranks per GPU).
 * The elements are cut into K slices, slice j of ps = ACXP_BIG_PART(count, K, 16 / element size)
 * elements from j * ps (the lane j rank's), each slice into the operation's blocks as the
 * two-shot's parts are (ACXP_BIG_PART's pieces); block b of rank r = at[g * K + j], for op s:
 *   1. copies its piece of every slice of the input into slot s % 2 of its own area;
 *   2. A: raises its phase-0 big flag [r][b] to V(s, 0) in its group's areas, waits for its
 *      group's (their inputs' pieces are in their slots);
 *   3. sums its piece of slice j over its group in place order (its own input at its place, the
 *      others from their slots; a partial sum: avg not divided, f16/bf16 rounded to the type) and
 *      stores it into the partial region [s % 2][g] (ACXP_GOS_OFF) of the rank at place j of every
 *      group (at[g' * K + j], itself for g' = g) at the piece's offset in the elements: G - 1
 *      stores of a slice across the link per rank (the whole count once per other GPU), none
 *      loaded (session 27; before, into every rank's area: K (G - 1) slices per rank, K times the
 *      traffic across the link, the largest step of the trace at 1 MiB and 4 ranks per GPU);
 *   4. B: raises its phase-1 big flag [r][b] to V(s, 0) in every rank's area, waits for all;
 *   5. reduces its piece of every slice jl over the groups in order (partial [s % 2][0], [1], ...,
 *      all in the area of its group's rank at place jl, on its own GPU; avg divided by n) into
 *      the output.
 * Reuse: rank x's slot s % 2 is written again for s + 2 by x (step 1), its partial region s % 2 by
 * the ranks at x's place (step 3), each only after its operation s + 1, which needs the B of s + 1
 * of every rank of x's group (A for the slot, B for the partials), which each raises after its
 * step 5 of s, its last read of both. The flag values V(s, 0) only grow
 * from operation to operation, whichever variant each runs: a flag at or past the value waited
 * for was raised by a peer at or past that point. Each element's result is reduced in the same
 * order from the same partial sums on every rank: bit-identical everywhere, the order (group 0's
 * ranks in place order) then group 1's partial, and so on, as the two-shot with groups'. Only with
 * groups (which need big slots, whose flags it uses). */
/* Registered buffers (issue 16's mapped path; collectives/coll_reg.c registers them). A rank's
 * group peers' executors map its registered buffers; each executor keeps their device addresses in
 * a table in its own area, [set rank][registration slot] at ACXP_BIG_REGTAB_OFF (zeroed by the rank
 * with the flags; ACXP_OP_REG writes an entry once the set has nothing in flight, so that no kernel
 * reads an entry while it changes). Per operation of
 * the two-shot with groups, block b of every rank publishes, before its first flag A, two words in
 * its own area at ACXP_BIG_PUB_OFF(b): its input's and its output's registration, each
 * ACXP_PUB(slot, byte offset) or 0 (none: not registered, a stale registration, or an address not
 * 16-byte aligned). After A, block b of each group peer reads them (A's acquire covers them) and,
 * per peer and per chunk:
 *   - input registered: the peer does not store its pieces (step 1); the owners read them from
 *     its input through the table (regtab + offset + the element's place), in the same order as
 *     they would read the staged copies: the sums are the same, bit for bit;
 *   - output registered: every owner stores its final part into the peer's output as it stores
 *     its own (step 5), and, between C and D, the rank at each place copies the parts that came
 *     into its second half from other GPUs (its lane's) into the output of every group peer that
 *     registered one, and into its own (step 6); the peer then copies nothing after D (every other
 *     part was stored into its output before the D it waited for). Unregistered outputs copy from the
 *     second halves as before, so ranks that registered and ranks that did not mix freely.
 * The words published for operation s are read only between the peers' A of s and their D of s's
 * last chunk: a rank writes them again for s + 1 only after its kernel of s has ended, which needs
 * every group peer's D of s. In place, an output element is stored only after every read of the
 * same element of the input: by the rank that read it (its own part, in the same thread) or after
 * C (the others). The host kind runs the same protocol (one block): its executor runs a later
 * buffer command at once while an all-reduce is in flight (it reads its own input from a copy taken
 * at the start), so a registered input or output relies on the rank keeping later commands on the
 * buffer behind the all-reduce, which it does for every collective on the host kind
 * (collectives/mpi_coll.c, stream order on the worker path). */
#define ACXP_REG_MAX 32 /* registration slots per set (coll_reg.c: the lowest free one) */
#define ACXP_PUB(slot, off) ((((uint64_t)(slot) + 1) << 56) | (uint64_t)(off))
#define ACXP_PUB_SLOT(w) ((int)((w) >> 56) - 1) /* -1: none */
#define ACXP_PUB_OFF(w) ((w) & ((1ull << 56) - 1))
#define ACXP_BIG_OFF(slot_bytes) ACXP_AREA_BYTES(slot_bytes)
#define ACXP_BIG_MAX_BLOCKS 128 /* the two-shot's blocks per operation at most (ACX_COLL_PEER_BIG_BLOCKS) */
#define ACXP_BIG_FLAG_BYTES ((uint64_t)ACXP_MAX_RANKS * ACXP_BIG_MAX_BLOCKS * 8) /* one phase's flags */
#define ACXP_BIG_FLAG_OFF(phase, from, block, slot_bytes) \
  (ACXP_BIG_OFF(slot_bytes) + (uint64_t)(phase) * ACXP_BIG_FLAG_BYTES + \
   ((uint64_t)(from) * ACXP_BIG_MAX_BLOCKS + (uint64_t)(block)) * 8)
/* The two-shot with groups' publication (below, "Registered buffers"): block b's two words, after
 * the flags. */
#define ACXP_BIG_PUB_BYTES ((uint64_t)ACXP_BIG_MAX_BLOCKS * 16)
#define ACXP_BIG_PUB_OFF(block, slot_bytes) \
  (ACXP_BIG_OFF(slot_bytes) + 2 * ACXP_BIG_FLAG_BYTES + (uint64_t)(block) * 16)
/* The registration table (below, "Registered buffers"), in this rank's own area (device memory: a
 * table in pinned host memory, read by every block of every operation, cost 0.9 us per block at
 * 16 MiB on 2xH200 under MPS, serialized: 116 us per all-reduce at 128 blocks, session 25). */
#define ACXP_BIG_REGTAB_OFF(slot_bytes) (ACXP_BIG_OFF(slot_bytes) + 2 * ACXP_BIG_FLAG_BYTES + ACXP_BIG_PUB_BYTES)
#define ACXP_BIG_REGTAB_BYTES ((uint64_t)ACXP_MAX_RANKS * ACXP_REG_MAX * 8)
#define ACXP_BIG_SLOT_OFF(k, slot_bytes, big_bytes) \
  (ACXP_BIG_REGTAB_OFF(slot_bytes) + ACXP_BIG_REGTAB_BYTES + (uint64_t)(k) * (big_bytes))
#define ACXP_AREA_BYTES_BIG(slot_bytes, big_bytes) \
  ((big_bytes) ? ACXP_BIG_SLOT_OFF(2, slot_bytes, big_bytes) : ACXP_AREA_BYTES(slot_bytes))
#define ACXP_GOS_OFF(parity, g, groups, slot_bytes, big_bytes) \
  (ACXP_BIG_SLOT_OFF(2, slot_bytes, big_bytes) + ((uint64_t)(parity) * (uint64_t)(groups) + (uint64_t)(g)) * (slot_bytes))
/* The whole area: with the one-shot with groups (gos_groups = G > 0, big slots required) the
 * partial regions follow the big slots. */
#define ACXP_AREA_BYTES_SET(slot_bytes, big_bytes, gos_groups) \
  ((gos_groups) ? ACXP_GOS_OFF(2, 0, gos_groups, slot_bytes, big_bytes) : ACXP_AREA_BYTES_BIG(slot_bytes, big_bytes))
#define ACXP_BIG_VAL(seq, t) (((uint64_t)(seq) << 32) + (uint64_t)(t) + 1)
#define ACXP_BIG_CHUNK(big_bytes, es, n) \
  ((big_bytes) / 2 / (es) / ((uint64_t)(n) * (16 / (es))) * ((uint64_t)(n) * (16 / (es))))
#define ACXP_BIG_PART(m, n, v) ((((m) + (uint64_t)(n) - 1) / (uint64_t)(n) + (v) - 1) / (v) * (v))
/* The parts of every chunk of an operation of count elements (cpe: ACXP_BIG_CHUNK): its first
 * chunk's, so that a short last chunk's pieces lie inside the full chunks' (above). */
#define ACXP_BIG_OP_PART(count, cpe, n, v) ACXP_BIG_PART((count) < (cpe) ? (count) : (cpe), n, v)

#ifdef __CUDACC__
#define ACXP_HD __host__ __device__
#else
#define ACXP_HD
#endif
/* Piece b of nb of part q of a chunk of m elements cut in parts of pp elements (a multiple of v):
 * [*lo, *hi), pieces of ceil(pp / nb) rounded up to v, clipped to the part and the chunk. The
 * two-shot's pieces (block b's) and the one-shot with groups' (slices for parts); the same on every
 * rank. */
static inline ACXP_HD void acxp_big_piece(uint64_t m, uint64_t pp, int q, int nb, int b, uint64_t v, uint64_t *lo,
                                          uint64_t *hi) {
  uint64_t bp = (pp + (uint64_t)nb - 1) / (uint64_t)nb;
  bp = (bp + v - 1) / v * v;
  const uint64_t p0 = (uint64_t)q * pp < m ? (uint64_t)q * pp : m, p1 = p0 + pp < m ? p0 + pp : m;
  *lo = p0 + (uint64_t)b * bp < p1 ? p0 + (uint64_t)b * bp : p1;
  *hi = *lo + bp < p1 ? *lo + bp : p1;
}

#define ACXP_BIG_MIN 65536 /* the smallest big slot (bytes, a multiple of 16) */
#define ACXP_BIG_AUTO_KB 65536 /* the big slot of ACX_COLL_PEER_BIG_KB=-1 (auto): the measured best */
/* ... and where the ranks form exactly 2 groups (2 GPUs, as many ranks each): the pipelined two-shot
 * with groups ran at 1.00-1.01 of one rank per GPU at 1 GiB, 4 per GPU, with it, 0.85-0.94 with
 * 64 MiB (2 of 4xH200 under MPS, session 29, 2 interleaved rounds; docs/benchmark.md). */
#define ACXP_BIG_AUTO_GROUPS2_KB 131072

/* The rest is C (the CUDA kernel needs only the layout above). */
#ifndef __cplusplus
#include <stdatomic.h>

#include "runtime/proto/limits.h"

_Static_assert(ACXP_MAX_RANKS * ACXP_MAX_BLOCKS * 8 <= ACXP_FLAG_BYTES, "the flags fit their part of the area");

typedef enum acxp_op {
  ACXP_OP_SETUP = 0x400,     /* arg[0] = set id (per rank process, never 0), arg[1] = nranks, arg[2] =
                                rank, arg[3] = host region id of the acxp_ctl_t; completes once the
                                executor has resolved every area */
  ACXP_OP_ALLREDUCE = 0x401, /* arg[0] = set id, dtype, buf[0] = send, buf[1] = recv, off[0], off[1]:
                                byte offsets into them, bytes = count in elements, arg[1] =
                                acx_redop_t, arg[2] = the registration slots of send (bits 0-7) and
                                recv (8-15), each slot + 1 (0: not registered; used by the two-shot
                                with groups on GPUs), arg[3] = operation number s (1, 2, ...), arg[4] =
                                deadline (ms from the executor's start of it) */
  ACXP_OP_DESTROY = 0x402,   /* arg[0] = set id, arg[4] = deadline (ms) for its operations in flight:
                                forgets the set once they are done (the rank frees the areas) */
  ACXP_OP_FENCE = 0x403,     /* arg[0] = set id: completes once the set's operations sent before it
                                have, with the set's first failure (ACX_OK: none): how a failure
                                of an operation sent without a future reaches acx_coll_synchronize */
  ACXP_OP_REG = 0x404        /* arg[0] = set id, arg[1] = registration slot (< ACXP_REG_MAX), arg[2] =
                                the set rank whose buffer it is, buf[0] = this executor's mapping of
                                it (0: clear the entry), arg[4] = deadline (ms): once the set has
                                nothing in flight, the table's [arg[2]][arg[1]] := its device
                                address (0 where cleared) */
} acxp_op_t;
_Static_assert(ACXP_OP_SETUP >= ACXP_OP_FIRST && ACXP_OP_REG <= ACXP_OP_LAST,
               "peer ops stay inside their range (runtime/proto/limits.h)");

#define ACXP_CTL_MAGIC 0x6163787065657231ull /* "acxpeer1" */

/* The host region the rank shares with its executor (acx_host_alloc: pinned, registered with CUDA,
 * kept across executor restarts). */
typedef struct acxp_ctl {
  uint64_t magic;
  uint64_t slot_bytes;            /* bytes of one data slot of every area */
  uint64_t ll_bytes;              /* all-reduces of at most this many bytes take the small-message
                                     variant (0: none; a multiple of 8, <= ACXP_LL_MAX) */
  uint64_t big_bytes;             /* the big slots' size: all-reduces larger than a slot take the
                                     two-shot variant (0: none, and such all-reduces are refused;
                                     else a multiple of 16, >= ACXP_BIG_MIN) */
  uint64_t big_blocks;            /* with big slots, on GPUs: the two-shot's blocks (1 to
                                     ACXP_BIG_MAX_BLOCKS; the same on every rank: block b waits for
                                     the peers' blocks b) */
  uint64_t area[ACXP_MAX_RANKS];  /* buffer ids in this rank's executor: [rank] its own area, the
                                     others the peers' areas imported */
  /* The two-shot's groups (above): groups * per_group == nranks, per_group > 1; grp[q] and lane[q]
   * rank q's group and place in it, at[g * per_group + j] the rank at place j of group g.
   * groups == 0: no groups (each rank its own, the two-shot without groups). */
  int32_t groups, per_group;
  int8_t grp[ACXP_MAX_RANKS], lane[ACXP_MAX_RANKS], at[ACXP_MAX_RANKS];
  /* Nonzero (an acx_status_t): operations waiting for peers leave at once with it. The rank sets
   * it when the coll breaks (a peer lost, a rebuild), so that no executor waits out its deadline
   * for a peer that will never come; cleared by the rank before a new SETUP. */
  _Atomic int32_t abort;
  /* With groups: the all-reduces of at least this many bytes (and above ll_bytes, up to a slot)
   * take the one-shot with groups (above; the areas have its partial regions); the others the
   * plain one-shot. 0: none does. */
  int32_t small_groups;
  /* 1: with groups, the all-reduces of at most ll_bytes push lines with groups (above); 0: every
   * rank pushes all its lines to every rank. */
  int32_t ll_groups;
  /* Written by the executor (the CUDA kernel) for pending entry i: nonzero when an operation
   * failed in its wait (ACX_ERR_COLL_TIMEOUT, or the abort word's status). */
  _Atomic int32_t status[ACXP_PENDING];
} acxp_ctl_t;
#endif

#endif
