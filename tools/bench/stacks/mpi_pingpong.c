/* MPI ping-pong of one size for SECS seconds (tools/bench/stacks/pingpong_ab.sh): one-way usec,
   the mean and the median round trip's half (the median is steady where other load preempts a rank
   for milliseconds now and then; the mean carries those). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  size_t n = strtoul(argv[1], 0, 0); double secs = atof(argv[2]);
  char *b = malloc(n); memset(b, rank, n);
  int iters = 0, stop = 0; double t0 = MPI_Wtime(), t;
  enum { kMaxRt = 1 << 20 };
  float *rt = rank == 0 ? malloc(kMaxRt * sizeof *rt) : 0;
  for (int i = 0; i < 20; ++i) {  /* warm-up */
    if (rank == 0) { MPI_Send(b, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD); MPI_Recv(b, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
    else { MPI_Recv(b, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(b, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD); }
  }
  t0 = MPI_Wtime();
  while (!stop) {
    for (int i = 0; i < 100; ++i) {
      if (rank == 0) {
        double s = MPI_Wtime();
        MPI_Send(b, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD); MPI_Recv(b, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (iters + i < kMaxRt) rt[iters + i] = (float)(MPI_Wtime() - s);
      }
      else { MPI_Recv(b, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(b, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD); }
    }
    iters += 100;
    t = MPI_Wtime();
    if (rank == 0) stop = (t - t0) >= secs;
    MPI_Bcast(&stop, 1, MPI_INT, 0, MPI_COMM_WORLD);
  }
  if (rank == 0) {
    int k = iters < kMaxRt ? iters : kMaxRt;
    qsort(rt, k, sizeof *rt, cmp_float);
    printf("%zu bytes %d iters one-way %.2f usec median %.2f usec\n", n, iters, (t - t0) / iters / 2 * 1e6,
           rt[k / 2] / 2 * 1e6);
  }
  MPI_Finalize();
  return 0;
}
