/* The two-shot's chunk layout (runtime/proto/peer_ops.h), as arithmetic: every chunk of an
 * operation has its first chunk's parts, so that block b's piece of a part in a short last chunk
 * lies inside its piece of a full chunk. The flags order block b with the peers' blocks b only,
 * so a block may write a big slot only where the peers' same block has read it; with each chunk
 * cut by its own size, a short chunk's pieces overlapped other blocks' pieces of the chunk two
 * before in the same slot (session 22: wrong values in test_coll_peer_big_cuda_np2 on 2xH100,
 * which only a GPU with many blocks shows; this test fails with that layout on any machine).
 * Also: in every chunk the blocks' pieces cover each part exactly once, the parts the chunk, and
 * what the pieces address fits the big slot's halves. And the trace's histogram buckets. No device. */
#include <stdio.h>

#include "acx_test.h"
#include "kernels/peer/peer_kernels.h"
#include "runtime/proto/peer_ops.h"

static int check(uint64_t es, int n, int nb, uint64_t big, uint64_t count) {
  const uint64_t v = 16 / es, cpe = ACXP_BIG_CHUNK(big, es, n), half = big / 2 / es;
  const uint64_t chunks = (count + cpe - 1) / cpe, pp = ACXP_BIG_OP_PART(count, cpe, n, v);
  int bad = 0;
  if (pp % v || (uint64_t)n * pp > half || cpe > half) bad++; /* the first half holds n parts */
  for (uint64_t t = 0; t < chunks; t++) {
    const uint64_t m = count - t * cpe < cpe ? count - t * cpe : cpe;
    uint64_t covered = 0;
    for (int q = 0; q < n; q++) {
      uint64_t next = (uint64_t)q * pp < m ? (uint64_t)q * pp : m; /* the part's start */
      for (int b = 0; b < nb; b++) {
        uint64_t lo, hi, lo0, hi0;
        acxp_big_piece(m, pp, q, nb, b, v, &lo, &hi);
        if (lo != next || hi < lo || hi > m) bad++; /* in order, no gap, no overlap */
        next = hi;
        covered += hi - lo;
        /* inside this block's piece of the first chunk (a full one where there are several) */
        acxp_big_piece(count < cpe ? count : cpe, pp, q, nb, b, v, &lo0, &hi0);
        if (hi > lo && (lo < lo0 || hi > hi0)) bad++;
        if (hi > lo && lo % v) bad++; /* pieces with elements start on whole vectors */
      }
      if (next != ((uint64_t)q * pp + pp < m ? (uint64_t)q * pp + pp : m)) bad++;
    }
    if (covered != m) bad++;
  }
  if (bad)
    printf("\n    %llu-byte elements, %d ranks, %d blocks, %llu-byte big slots, %llu elements: %d violations",
           (unsigned long long)es, n, nb, (unsigned long long)big, (unsigned long long)count, bad);
  return bad;
}

static void test_chunks_share_the_layout(void) {
  static const uint64_t sizes[] = {1, 2, 4, 8};
  static const int ranks[] = {2, 3, 4, 6, 8, 16}, blocks[] = {1, 5, 32, 64, 128};
  static const uint64_t bigs[] = {ACXP_BIG_MIN, 3 * ACXP_BIG_MIN, (uint64_t)ACXP_BIG_AUTO_KB * 1024};
  int bad = 0, cases = 0;
  for (size_t e = 0; e < sizeof sizes / sizeof *sizes; e++)
    for (size_t r = 0; r < sizeof ranks / sizeof *ranks; r++)
      for (size_t k = 0; k < sizeof blocks / sizeof *blocks; k++)
        for (size_t g = 0; g < sizeof bigs / sizeof *bigs; g++) {
          const uint64_t cpe = ACXP_BIG_CHUNK(bigs[g], sizes[e], ranks[r]);
          /* one element; less than, exactly and just over a chunk; a third of a chunk after two
           * (test_coll's 83 KiB in 64 KiB slots: three chunks, the last short); more */
          const uint64_t counts[] = {1, 7, cpe - 1, cpe, cpe + 1, 2 * cpe + cpe / 3, 3 * cpe + 17, 5 * cpe - 3};
          for (size_t c = 0; c < sizeof counts / sizeof *counts; c++, cases++)
            bad += check(sizes[e], ranks[r], blocks[k], bigs[g], counts[c]);
        }
  printf("\n    %d layouts checked", cases);
  CU_ASSERT_EQUAL(bad, 0);
}

/* ACX_COLL_PEER_TRACE's histogram buckets (kernels/peer/peer_kernels.h): every time from 0 to past
 * the last bucket's start falls in a bucket whose bounds (what the executor's percentiles read)
 * hold it, the buckets never go down as the time grows, and the last one takes everything beyond. */
static void test_trace_buckets(void) {
  int bad = 0, prev = 0;
  const uint64_t last = ACXK_TRACE_BUCKET_LO(ACXK_TRACE_BUCKETS - 1);
  for (uint64_t t = 0; t < 2 * last; t += t < 4096 ? 1 : t / 4096) {
    const int b = acxk_trace_bucket(t);
    if (b < prev || b < 0 || b >= ACXK_TRACE_BUCKETS) bad++;
    else if (b < ACXK_TRACE_BUCKETS - 1 ? !(ACXK_TRACE_BUCKET_LO(b) <= t && t < ACXK_TRACE_BUCKET_LO(b) + ACXK_TRACE_BUCKET_W(b))
                                        : t < last)
      bad++;
    if (bad && bad < 4) printf("\n    %llu ns: bucket %d", (unsigned long long)t, b);
    prev = b;
  }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(acxk_trace_bucket(UINT64_MAX), ACXK_TRACE_BUCKETS - 1);
  CU_ASSERT_EQUAL(acxk_trace_bucket(1000), acxk_trace_bucket(1023)); /* 4 per power of two: [896, 1024) */
  CU_ASSERT_NOT_EQUAL(acxk_trace_bucket(1023), acxk_trace_bucket(1024));
}

int main(void) {
  static const acx_test_case_t cases[] = {ACX_TEST(test_chunks_share_the_layout), ACX_TEST(test_trace_buckets),
                                          ACX_TEST_END};
  return acx_test_run("peer_layout", cases, NULL, NULL);
}
