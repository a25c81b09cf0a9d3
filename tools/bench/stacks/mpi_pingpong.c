/* MPI ping-pong of one size for SECS seconds (tools/bench/stacks/pingpong_ab.sh): one-way usec. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  size_t n = strtoul(argv[1], 0, 0); double secs = atof(argv[2]);
  char *b = malloc(n); memset(b, rank, n);
  int iters = 0, stop = 0; double t0 = MPI_Wtime(), t;
  for (int i = 0; i < 20; ++i) {  /* warm-up */
    if (rank == 0) { MPI_Send(b, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD); MPI_Recv(b, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
    else { MPI_Recv(b, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(b, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD); }
  }
  t0 = MPI_Wtime();
  while (!stop) {
    for (int i = 0; i < 100; ++i) {
      if (rank == 0) { MPI_Send(b, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD); MPI_Recv(b, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
      else { MPI_Recv(b, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(b, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD); }
    }
    iters += 100;
    t = MPI_Wtime();
    if (rank == 0) stop = (t - t0) >= secs;
    MPI_Bcast(&stop, 1, MPI_INT, 0, MPI_COMM_WORLD);
  }
  if (rank == 0) printf("%zu bytes %d iters one-way %.2f usec\n", n, iters, (t - t0) / iters / 2 * 1e6);
  MPI_Finalize();
  return 0;
}
