/* droce-testpmd's interactive prompt (DPDK cmdline), in C: DPDK's command
 * tables use flexible array members that C++ cannot initialise. */
#ifndef DROCE_APPS_TESTPMD_PROMPT_H_
#define DROCE_APPS_TESTPMD_PROMPT_H_

#ifdef __cplusplus
extern "C" {
#endif

struct droce_prompt_ops {
  void *ctx;
  void (*show_port_stats)(void *ctx);
  void (*show_qp)(void *ctx, int qpn); /* qpn < 0: every QP */
  void (*clear_stats)(void *ctx);
  int (*set_fwd)(void *ctx, const char *engine); /* 0 or an error printed by the callee */
  int (*set_mtu)(void *ctx, unsigned mtu);
  void (*start)(void *ctx); /* runs the engine in the background */
  void (*stop)(void *ctx);  /* ends it and prints its result line */
};

/* Runs the prompt on stdin until `quit` or end of input. */
void droce_prompt_run(const struct droce_prompt_ops *ops);

#ifdef __cplusplus
}
#endif

#endif /* DROCE_APPS_TESTPMD_PROMPT_H_ */
