/* The C ABI, built with pkg-config: attaches 16 floats, sets them to VALUE, steps once
 * and checks that every one came back as EXPECT (the mean over the cluster's nodes). */
#include <gossip/gossip.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: c_consumer ENDPOINT VALUE EXPECT\n");
    return 2;
  }
  const float value = strtof(argv[2], NULL), expect = strtof(argv[3], NULL);
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
  if (gossip_attach(c, 1, names, numels, tensors, &initialized) != GOSSIP_OK) {
    fprintf(stderr, "%s\n", gossip_last_error(c));
    gossip_close(c);
    return 1;
  }
  for (int i = 0; i < 16; ++i) tensors[0][i] = value;
  if (gossip_step(c, &r) != GOSSIP_OK) {
    fprintf(stderr, "%s\n", gossip_last_error(c));
    gossip_close(c);
    return 1;
  }
  int wrong = 0;
  for (int i = 0; i < 16; ++i) wrong += fabsf(tensors[0][i] - expect) > 1e-6f;
  printf("c consumer: step %llu, w[0] = %g (wrote %g, expected %g)\n", (unsigned long long)r.step,
         tensors[0][0], value, expect);
  gossip_close(c);
  return wrong == 0 && r.step == 1 ? 0 : 1;
}
