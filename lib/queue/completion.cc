#include "queue/completion.h"

namespace droce::queue {

const char* WcStatusName(WcStatus s) {
  static constexpr const char* kNames[] = {
      "SUCCESS",        "LOC_LEN_ERR",      "LOC_QP_OP_ERR",   "LOC_EEC_OP_ERR",
      "LOC_PROT_ERR",   "WR_FLUSH_ERR",     "MW_BIND_ERR",     "BAD_RESP_ERR",
      "LOC_ACCESS_ERR", "REM_INV_REQ_ERR",  "REM_ACCESS_ERR",  "REM_OP_ERR",
      "RETRY_EXC_ERR",  "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR",
      "REM_ABORT_ERR",  "INV_EECN_ERR",     "INV_EEC_STATE_ERR", "FATAL_ERR",
      "RESP_TIMEOUT_ERR", "GENERAL_ERR"};
  const auto i = static_cast<unsigned>(s);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "?";
}

}  // namespace droce::queue
