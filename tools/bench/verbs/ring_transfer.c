// What a memif-like ring's lines cost the sending CPU when the other CPU
// reads them (tools/bench/verbs/results.md): 1024 slots of
// 2 KiB buffers with 16-byte descriptors, 138-byte frames (a 64 B WRITE's)
// written in bursts of 16, the index stored with a release and a seq_cst
// fence after it as MemifTx::Send does; a consumer pinned to CPU 1 copies
// every frame out as soon as it is published. Prints the producer's (CPU
// 0's) ns per frame. PREFETCH_SLOTS > 0: after each burst, prefetchw the
// next that many slots' three buffer lines and their descriptor lines.
// CONSUMER 0: no consumer (every line stays the producer's own). STREAM 1:
// frames copied with non-temporal stores (the frame rounded up to 16
// bytes) and an sfence before the index, as MemifTx does for a burst of
// small frames.
//   cc -O2 -march=native -pthread tools/bench/verbs/ring_transfer.c -o /tmp/ring_transfer
//   /tmp/ring_transfer PREFETCH_SLOTS [CONSUMER [STREAM]]
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <emmintrin.h>
enum { SLOTS = 1024, BUF = 2048, LEN = 138, BURST = 16 };
struct desc { uint16_t flags, region; uint32_t length, offset, meta; };
static struct desc ring[SLOTS] __attribute__((aligned(64)));
static uint8_t *region;
static _Atomic uint16_t head __attribute__((aligned(64))), tail __attribute__((aligned(64)));
static _Atomic int stop;
static int prefetch, consumer = 1, stream;
static uint64_t now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000ull + t.tv_nsec; }
static void pin(int c) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(c, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s); }
static void *consume(void *a) {
  pin(1); uint8_t out[256]; uint64_t sum = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    uint16_t t = atomic_load_explicit(&tail, memory_order_relaxed), h = atomic_load_explicit(&head, memory_order_acquire);
    while (t != h) { struct desc *d = &ring[t & (SLOTS - 1)]; memcpy(out, region + d->offset, d->length); sum += out[7]; t++; }
    atomic_store_explicit(&tail, t, memory_order_release);
  }
  return (void *)(uintptr_t)sum;
}
int main(int argc, char **argv) {
  prefetch = argc > 1 ? atoi(argv[1]) : 0; consumer = argc > 2 ? atoi(argv[2]) : 1;
  stream = argc > 3 ? atoi(argv[3]) : 0;
  region = aligned_alloc(4096, SLOTS * BUF);
  for (int i = 0; i < SLOTS; i++) { ring[i].offset = i * BUF; memset(region + i * BUF, 0, 256); }
  uint8_t frame[BURST][256]; for (int i = 0; i < BURST; i++) memset(frame[i], i, 256);
  pthread_t th; if (consumer) pthread_create(&th, 0, consume, 0);
  pin(0);
  uint64_t n = 0, t0 = now(); uint16_t h = 0;
  while (n < 40000000) {
    uint16_t free_slots = SLOTS - (uint16_t)(h - atomic_load_explicit(&tail, memory_order_acquire));
    if (!consumer) free_slots = SLOTS;
    if (free_slots < BURST) continue;
    for (int i = 0; i < BURST; i++, h++) {
      struct desc *d = &ring[h & (SLOTS - 1)];
      uint8_t *dst = region + d->offset;
      if (stream) {
        for (int k = 0; k < (LEN + 15) / 16; k++)
          _mm_stream_si128((__m128i *)(dst + 16 * k), _mm_loadu_si128((const __m128i *)(frame[i] + 16 * k)));
      } else {
        memcpy(dst, frame[i], LEN);
      }
      d->length = LEN; d->flags = 0;
    }
    if (stream) _mm_sfence();
    atomic_store_explicit(&head, h, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (prefetch) for (int i = 0; i < prefetch; i++) { uint16_t s = h + i; uint8_t *b = region + (s & (SLOTS - 1)) * BUF;
      __builtin_prefetch(b, 1, 3); __builtin_prefetch(b + 64, 1, 3); __builtin_prefetch(b + 128, 1, 3);
      if ((s & 3) == 0) __builtin_prefetch(&ring[s & (SLOTS - 1)], 1, 3); }
    if (!consumer) atomic_store_explicit(&tail, h, memory_order_relaxed);
    n += BURST;
  }
  uint64_t t1 = now(); atomic_store(&stop, 1); if (consumer) pthread_join(th, 0);
  printf("prefetch %d consumer %d stream %d: %.1f ns/frame\n", prefetch, consumer, stream, (double)(t1 - t0) / n);
}
