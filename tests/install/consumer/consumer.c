/* The C ABI, built with pkg-config: attaches, steps once, says what it got. */
#include <gossip/gossip.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  gossip_client* c = NULL;
  if (gossip_connect(argv[1], "c-consumer", 0, 10000, &c) != GOSSIP_OK) {
    fprintf(stderr, "%s\n", gossip_last_error(NULL));
    return 1;
  }
  const char* names[] = {"w"};
  const uint64_t numels[] = {16};
  float* tensors[1];
  int initialized = 0;
  gossip_step_result r;
  if (gossip_attach(c, 1, names, numels, tensors, &initialized) != GOSSIP_OK ||
      gossip_step(c, &r) != GOSSIP_OK) {
    fprintf(stderr, "%s\n", gossip_last_error(c));
    gossip_close(c);
    return 1;
  }
  printf("c consumer: step %llu\n", (unsigned long long)r.step);
  gossip_close(c);
  return 0;
}
