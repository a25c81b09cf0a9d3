// The transport's enums are passed through the verbs boundary unconverted:
// their values must be those of <infiniband/verbs.h>. Checked at compile
// time (a mismatch fails the build); the test body only names the file in
// the unit suite.
#include <infiniband/verbs.h>

#include "gtest/gtest.h"
#include "mem/mr_table.h"
#include "queue/completion.h"
#include "transport/qp.h"
#include "transport/types.h"

namespace droce {
namespace {

using transport::AttrMask;
using transport::QpState;
using transport::QpType;
using transport::WrOpcode;
using queue::WcOpcode;
using queue::WcStatus;

#define SAME(ours, theirs) static_assert(static_cast<int>(ours) == static_cast<int>(theirs), #ours)

SAME(WrOpcode::kRdmaWrite, IBV_WR_RDMA_WRITE);
SAME(WrOpcode::kRdmaWriteWithImm, IBV_WR_RDMA_WRITE_WITH_IMM);
SAME(WrOpcode::kSend, IBV_WR_SEND);
SAME(WrOpcode::kSendWithImm, IBV_WR_SEND_WITH_IMM);
SAME(WrOpcode::kRdmaRead, IBV_WR_RDMA_READ);
SAME(WrOpcode::kAtomicCmpAndSwp, IBV_WR_ATOMIC_CMP_AND_SWP);
SAME(WrOpcode::kAtomicFetchAndAdd, IBV_WR_ATOMIC_FETCH_AND_ADD);
SAME(WrOpcode::kLocalInv, IBV_WR_LOCAL_INV);
SAME(WrOpcode::kBindMw, IBV_WR_BIND_MW);
SAME(WrOpcode::kSendWithInv, IBV_WR_SEND_WITH_INV);

SAME(transport::kSendFence, IBV_SEND_FENCE);
SAME(transport::kSendSignaled, IBV_SEND_SIGNALED);
SAME(transport::kSendSolicited, IBV_SEND_SOLICITED);
SAME(transport::kSendInline, IBV_SEND_INLINE);

SAME(QpState::kReset, IBV_QPS_RESET);
SAME(QpState::kInit, IBV_QPS_INIT);
SAME(QpState::kRtr, IBV_QPS_RTR);
SAME(QpState::kRts, IBV_QPS_RTS);
SAME(QpState::kSqd, IBV_QPS_SQD);
SAME(QpState::kSqe, IBV_QPS_SQE);
SAME(QpState::kErr, IBV_QPS_ERR);

SAME(QpType::kRc, IBV_QPT_RC);
SAME(QpType::kUc, IBV_QPT_UC);

SAME(transport::kAttrState, IBV_QP_STATE);
SAME(transport::kAttrCurState, IBV_QP_CUR_STATE);
SAME(transport::kAttrEnSqdAsyncNotify, IBV_QP_EN_SQD_ASYNC_NOTIFY);
SAME(transport::kAttrAccessFlags, IBV_QP_ACCESS_FLAGS);
SAME(transport::kAttrPkeyIndex, IBV_QP_PKEY_INDEX);
SAME(transport::kAttrPort, IBV_QP_PORT);
SAME(transport::kAttrQkey, IBV_QP_QKEY);
SAME(transport::kAttrAv, IBV_QP_AV);
SAME(transport::kAttrPathMtu, IBV_QP_PATH_MTU);
SAME(transport::kAttrTimeout, IBV_QP_TIMEOUT);
SAME(transport::kAttrRetryCnt, IBV_QP_RETRY_CNT);
SAME(transport::kAttrRnrRetry, IBV_QP_RNR_RETRY);
SAME(transport::kAttrRqPsn, IBV_QP_RQ_PSN);
SAME(transport::kAttrMaxQpRdAtomic, IBV_QP_MAX_QP_RD_ATOMIC);
SAME(transport::kAttrAltPath, IBV_QP_ALT_PATH);
SAME(transport::kAttrMinRnrTimer, IBV_QP_MIN_RNR_TIMER);
SAME(transport::kAttrSqPsn, IBV_QP_SQ_PSN);
SAME(transport::kAttrMaxDestRdAtomic, IBV_QP_MAX_DEST_RD_ATOMIC);
SAME(transport::kAttrPathMigState, IBV_QP_PATH_MIG_STATE);
SAME(transport::kAttrCap, IBV_QP_CAP);
SAME(transport::kAttrDestQpn, IBV_QP_DEST_QPN);

SAME(WcStatus::kSuccess, IBV_WC_SUCCESS);
SAME(WcStatus::kLocLenErr, IBV_WC_LOC_LEN_ERR);
SAME(WcStatus::kLocQpOpErr, IBV_WC_LOC_QP_OP_ERR);
SAME(WcStatus::kLocEecOpErr, IBV_WC_LOC_EEC_OP_ERR);
SAME(WcStatus::kLocProtErr, IBV_WC_LOC_PROT_ERR);
SAME(WcStatus::kWrFlushErr, IBV_WC_WR_FLUSH_ERR);
SAME(WcStatus::kMwBindErr, IBV_WC_MW_BIND_ERR);
SAME(WcStatus::kBadRespErr, IBV_WC_BAD_RESP_ERR);
SAME(WcStatus::kLocAccessErr, IBV_WC_LOC_ACCESS_ERR);
SAME(WcStatus::kRemInvReqErr, IBV_WC_REM_INV_REQ_ERR);
SAME(WcStatus::kRemAccessErr, IBV_WC_REM_ACCESS_ERR);
SAME(WcStatus::kRemOpErr, IBV_WC_REM_OP_ERR);
SAME(WcStatus::kRetryExcErr, IBV_WC_RETRY_EXC_ERR);
SAME(WcStatus::kRnrRetryExcErr, IBV_WC_RNR_RETRY_EXC_ERR);
SAME(WcStatus::kLocRddViolErr, IBV_WC_LOC_RDD_VIOL_ERR);
SAME(WcStatus::kRemInvRdReqErr, IBV_WC_REM_INV_RD_REQ_ERR);
SAME(WcStatus::kRemAbortErr, IBV_WC_REM_ABORT_ERR);
SAME(WcStatus::kInvEecnErr, IBV_WC_INV_EECN_ERR);
SAME(WcStatus::kInvEecStateErr, IBV_WC_INV_EEC_STATE_ERR);
SAME(WcStatus::kFatalErr, IBV_WC_FATAL_ERR);
SAME(WcStatus::kRespTimeoutErr, IBV_WC_RESP_TIMEOUT_ERR);
SAME(WcStatus::kGeneralErr, IBV_WC_GENERAL_ERR);

SAME(WcOpcode::kSend, IBV_WC_SEND);
SAME(WcOpcode::kRdmaWrite, IBV_WC_RDMA_WRITE);
SAME(WcOpcode::kRdmaRead, IBV_WC_RDMA_READ);
SAME(WcOpcode::kCompSwap, IBV_WC_COMP_SWAP);
SAME(WcOpcode::kFetchAdd, IBV_WC_FETCH_ADD);
SAME(WcOpcode::kBindMw, IBV_WC_BIND_MW);
SAME(WcOpcode::kLocalInv, IBV_WC_LOCAL_INV);
SAME(WcOpcode::kRecv, IBV_WC_RECV);
SAME(WcOpcode::kRecvRdmaWithImm, IBV_WC_RECV_RDMA_WITH_IMM);
SAME(queue::kWcWithImm, IBV_WC_WITH_IMM);
SAME(queue::kWcWithInv, IBV_WC_WITH_INV);

SAME(mem::kLocalWrite, IBV_ACCESS_LOCAL_WRITE);
SAME(mem::kRemoteWrite, IBV_ACCESS_REMOTE_WRITE);
SAME(mem::kRemoteRead, IBV_ACCESS_REMOTE_READ);
SAME(mem::kRemoteAtomic, IBV_ACCESS_REMOTE_ATOMIC);
SAME(mem::kMwBind, IBV_ACCESS_MW_BIND);
SAME(mem::kZeroBased, IBV_ACCESS_ZERO_BASED);

#undef SAME

TEST(VerbsEnums, TransportValuesAreTheVerbsValues) {
  // Every check above is a static_assert; a mismatch does not compile.
  EXPECT_EQ(static_cast<int>(QpState::kErr), IBV_QPS_ERR);
}

}  // namespace
}  // namespace droce
