// An MPI job's everyday traffic with every byte checked: point-to-point
// ping-pong between rank 0 and every other rank at sizes from 1 byte to
// 4 MiB (eager and rendezvous protocols), MPI_Allreduce, MPI_Alltoall, and
// one-sided MPI_Put / MPI_Get / MPI_Accumulate in fence and lock epochs.
// Prints "mpi_check: N checks passed on R ranks" at rank 0 and exits 0;
// any wrong byte aborts the job with a message saying where.
//   mpi_check [-r ROUNDS] [-max BYTES] [-loop SECONDS]
//   -loop: repeat the ping-pong for that long (a job to kill mid-way).
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size;
static long checks;

static void Fail(const char* what, long at, long got, long want) {
  fprintf(stderr, "mpi_check: rank %d: %s: at %ld got %ld want %ld\n", rank, what, at, got, want);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

// The byte at offset i of a message from `src` in round `round`.
static unsigned char Pattern(int src, int round, size_t i) {
  return (unsigned char)(src * 131 + round * 17 + i * 7 + (i >> 8));
}

static void Fill(unsigned char* b, size_t n, int src, int round) {
  for (size_t i = 0; i < n; ++i) b[i] = Pattern(src, round, i);
}

static void Expect(const unsigned char* b, size_t n, int src, int round, const char* what) {
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != Pattern(src, round, i)) Fail(what, (long)i, b[i], Pattern(src, round, i));
  }
  ++checks;
}

// Rank 0 sends to every peer, the peer checks and answers with its own pattern.
static void PingPong(size_t max, int rounds) {
  unsigned char* out = malloc(max);
  unsigned char* in = malloc(max);
  for (size_t n = 1; n <= max; n = n < 64 ? n * 4 : n * 8) {
    for (int r = 0; r < rounds; ++r) {
      for (int peer = 1; peer < size; ++peer) {
        if (rank == 0) {
          Fill(out, n, 0, r);
          MPI_Send(out, (int)n, MPI_BYTE, peer, r, MPI_COMM_WORLD);
          memset(in, 0, n);
          MPI_Recv(in, (int)n, MPI_BYTE, peer, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          Expect(in, n, peer, r, "ping-pong reply");
        } else if (rank == peer) {
          memset(in, 0, n);
          MPI_Recv(in, (int)n, MPI_BYTE, 0, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          Expect(in, n, 0, r, "ping-pong request");
          Fill(out, n, peer, r);
          MPI_Send(out, (int)n, MPI_BYTE, 0, r, MPI_COMM_WORLD);
        }
      }
    }
  }
  free(out);
  free(in);
}

static void Collectives(int rounds) {
  for (int r = 0; r < rounds; ++r) {
    enum { kInts = 4096 };
    static long mine[kInts], sum[kInts];
    for (int i = 0; i < kInts; ++i) mine[i] = (long)(rank + 1) * (i + r);
    MPI_Allreduce(mine, sum, kInts, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    const long ranks_sum = (long)size * (size + 1) / 2;
    for (int i = 0; i < kInts; ++i) {
      if (sum[i] != ranks_sum * (i + r)) Fail("MPI_Allreduce", i, sum[i], ranks_sum * (i + r));
    }
    ++checks;
    // Alltoall: block j of rank k's send buffer goes to rank j, tagged (k, j).
    const int block = 1024 + 8 * r;
    int* send = malloc(sizeof(int) * block * size);
    int* recv = malloc(sizeof(int) * block * size);
    for (int j = 0; j < size; ++j) {
      for (int i = 0; i < block; ++i) send[j * block + i] = (rank << 20) ^ (j << 12) ^ i ^ r;
    }
    MPI_Alltoall(send, block, MPI_INT, recv, block, MPI_INT, MPI_COMM_WORLD);
    for (int k = 0; k < size; ++k) {
      for (int i = 0; i < block; ++i) {
        const int want = (k << 20) ^ (rank << 12) ^ i ^ r;
        if (recv[k * block + i] != want) Fail("MPI_Alltoall", k * block + i, recv[k * block + i], want);
      }
    }
    ++checks;
    free(send);
    free(recv);
  }
}

// Each rank exposes a window of `size` slots of `n` bytes; rank k puts its
// pattern into slot k of its right neighbour and gets slot k back from it.
static void OneSided(size_t n, int rounds) {
  unsigned char* base;
  MPI_Win win;
  MPI_Win_allocate((MPI_Aint)(n * size), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
  unsigned char* out = malloc(n);
  unsigned char* back = malloc(n);
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  for (int r = 0; r < rounds; ++r) {
    memset(base, 0, n * size);
    Fill(out, n, rank, r);
    MPI_Win_fence(0, win);
    MPI_Put(out, (int)n, MPI_BYTE, right, (MPI_Aint)(n * rank), (int)n, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    Expect(base + n * left, n, left, r, "MPI_Put (fence) landed");
    memset(back, 0, n);
    MPI_Get(back, (int)n, MPI_BYTE, right, (MPI_Aint)(n * rank), (int)n, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    Expect(back, n, rank, r, "MPI_Get (fence)");
    // Passive target: lock, put a new round's pattern, flush, get it back.
    Fill(out, n, rank, r + 1000);
    MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win);
    MPI_Put(out, (int)n, MPI_BYTE, right, (MPI_Aint)(n * rank), (int)n, MPI_BYTE, win);
    MPI_Win_flush(right, win);
    memset(back, 0, n);
    MPI_Get(back, (int)n, MPI_BYTE, right, (MPI_Aint)(n * rank), (int)n, MPI_BYTE, win);
    MPI_Win_unlock(right, win);
    Expect(back, n, rank, r + 1000, "MPI_Get after MPI_Put (lock)");
    // Accumulate: every rank adds rank+1 to slot 0 (as longs) of rank 0.
    long one = rank + 1, total = 0;
    MPI_Win_fence(0, win);
    if (rank == 0) memset(base, 0, sizeof(long));
    MPI_Win_fence(0, win);
    MPI_Accumulate(&one, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win);
    MPI_Win_fence(0, win);
    if (rank == 0) {
      memcpy(&total, base, sizeof total);
      if (total != (long)size * (size + 1) / 2) Fail("MPI_Accumulate", 0, total, (long)size * (size + 1) / 2);
      ++checks;
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  free(out);
  free(back);
  MPI_Win_free(&win);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rounds = 2;
  size_t max = 4 << 20;
  double loop = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "-r") == 0) rounds = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "-max") == 0) max = (size_t)atol(argv[i + 1]);
    else if (strcmp(argv[i], "-loop") == 0) loop = atof(argv[i + 1]);
  }
  if (size < 2) {
    fprintf(stderr, "mpi_check: needs at least 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (loop > 0) {  // a job to kill mid-way: say who is who
    printf("mpi_check: rank %d pid %ld\n", rank, (long)getpid());
    fflush(stdout);
  }
  const double start = MPI_Wtime();
  long passes = 0;
  do {
    PingPong(max, rounds);
    if (loop > 0 && rank == 0 && passes++ == 0) {
      printf("mpi_check: first ping-pong pass done at %.1f s\n", MPI_Wtime() - start);
      fflush(stdout);
    }
    int again = loop > 0 && MPI_Wtime() - start < loop;
    MPI_Bcast(&again, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!again) break;
  } while (1);
  Collectives(rounds);
  OneSided(64, rounds);
  OneSided(256 << 10, rounds);
  long all = 0;
  MPI_Reduce(&checks, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_check: %ld checks passed on %d ranks\n", all, size);
  MPI_Finalize();
  return 0;
}
