// One rank of the OpenMPI all-reduce benchmark: the loop of bench_loop.h around
// MPI_Allreduce(MPI_IN_PLACE, ..., MPI_FLOAT, MPI_SUM). Measures, never asserts.
//
//   mpirun --oversubscribe --allow-run-as-root --mca btl tcp,self
//     --mca btl_tcp_if_include lo -np 4 mpi_bench --sizes 4K,1M --reps 50,20 --warmup 2
//
// Built by bench/allreduce.sh with mpicxx; the algorithm is whatever Open MPI's
// tuned collective component picks for the size (ring or recursive doubling).

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "bench/allreduce/bench_loop.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  gossip::bench::LoopOptions o;
  MPI_Comm_rank(MPI_COMM_WORLD, &o.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &o.size);
  std::string sizes = "4K,1M,16M", reps = "20", warmup = "2";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--sizes")
      sizes = argv[i + 1];
    else if (flag == "--reps")
      reps = argv[i + 1];
    else if (flag == "--warmup")
      warmup = argv[i + 1];
    else {
      std::fprintf(stderr, "mpi_bench: unknown flag %s (--sizes, --reps, --warmup)\n",
                   flag.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  o.sizes = gossip::bench::parse_sizes(sizes);
  o.reps = gossip::bench::parse_ints(reps);
  o.warmup = gossip::bench::parse_ints(warmup);

  const auto allreduce = [](std::vector<float>& data) {
    const int rc = MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()),
                                 MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) std::fprintf(stderr, "mpi_bench: MPI_Allreduce failed (%d)\n", rc);
    return rc == MPI_SUCCESS;
  };
  const auto barrier = [] { return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS; };
  const int rc = gossip::bench::run_loop("openmpi", o, "", allreduce, barrier);
  MPI_Finalize();
  return rc;
}
