//go:build verbs

package ibv

/*
#include <infiniband/verbs.h>
*/
import "C"

// Each line fails to compile if the constant in consts.go (which the build
// without cgo needs) differs from libibverbs' own.
var (
	_ = [1]int{}[int(AccessLocalWrite)-C.IBV_ACCESS_LOCAL_WRITE]
	_ = [1]int{}[int(AccessRemoteWrite)-C.IBV_ACCESS_REMOTE_WRITE]
	_ = [1]int{}[int(AccessRemoteRead)-C.IBV_ACCESS_REMOTE_READ]
	_ = [1]int{}[int(AccessRemoteAtomic)-C.IBV_ACCESS_REMOTE_ATOMIC]
	_ = [1]int{}[int(OpWrite)-C.IBV_WR_RDMA_WRITE]
	_ = [1]int{}[int(OpWriteWithImm)-C.IBV_WR_RDMA_WRITE_WITH_IMM]
	_ = [1]int{}[int(OpSend)-C.IBV_WR_SEND]
	_ = [1]int{}[int(OpSendWithImm)-C.IBV_WR_SEND_WITH_IMM]
	_ = [1]int{}[int(OpRead)-C.IBV_WR_RDMA_READ]
	_ = [1]int{}[int(OpCompareSwap)-C.IBV_WR_ATOMIC_CMP_AND_SWP]
	_ = [1]int{}[int(OpFetchAdd)-C.IBV_WR_ATOMIC_FETCH_AND_ADD]
	_ = [1]int{}[int(SendFence)-C.IBV_SEND_FENCE]
	_ = [1]int{}[int(SendSignaled)-C.IBV_SEND_SIGNALED]
	_ = [1]int{}[int(SendInline)-C.IBV_SEND_INLINE]
	_ = [1]int{}[int(StatusSuccess)-C.IBV_WC_SUCCESS]
	_ = [1]int{}[int(StatusLocLenErr)-C.IBV_WC_LOC_LEN_ERR]
	_ = [1]int{}[int(StatusLocQPOpErr)-C.IBV_WC_LOC_QP_OP_ERR]
	_ = [1]int{}[int(StatusLocProtErr)-C.IBV_WC_LOC_PROT_ERR]
	_ = [1]int{}[int(StatusFlushErr)-C.IBV_WC_WR_FLUSH_ERR]
	_ = [1]int{}[int(StatusBadRespErr)-C.IBV_WC_BAD_RESP_ERR]
	_ = [1]int{}[int(StatusLocAccessErr)-C.IBV_WC_LOC_ACCESS_ERR]
	_ = [1]int{}[int(StatusRemAccessErr)-C.IBV_WC_REM_ACCESS_ERR]
	_ = [1]int{}[int(StatusRemInvReqErr)-C.IBV_WC_REM_INV_REQ_ERR]
	_ = [1]int{}[int(StatusRemOpErr)-C.IBV_WC_REM_OP_ERR]
	_ = [1]int{}[int(StatusRetryExcErr)-C.IBV_WC_RETRY_EXC_ERR]
	_ = [1]int{}[int(StatusRNRRetryExc)-C.IBV_WC_RNR_RETRY_EXC_ERR]
	_ = [1]int{}[int(StatusRemAbortErr)-C.IBV_WC_REM_ABORT_ERR]
	_ = [1]int{}[int(StatusFatalErr)-C.IBV_WC_FATAL_ERR]
	_ = [1]int{}[int(StatusRespTimeout)-C.IBV_WC_RESP_TIMEOUT_ERR]
	_ = [1]int{}[int(StatusGeneralErr)-C.IBV_WC_GENERAL_ERR]
	_ = [1]int{}[int(WCSend)-C.IBV_WC_SEND]
	_ = [1]int{}[int(WCWrite)-C.IBV_WC_RDMA_WRITE]
	_ = [1]int{}[int(WCRead)-C.IBV_WC_RDMA_READ]
	_ = [1]int{}[int(WCCompareSwap)-C.IBV_WC_COMP_SWAP]
	_ = [1]int{}[int(WCFetchAdd)-C.IBV_WC_FETCH_ADD]
	_ = [1]int{}[int(WCRecv)-C.IBV_WC_RECV]
	_ = [1]int{}[int(WCRecvImm)-C.IBV_WC_RECV_RDMA_WITH_IMM]
	_ = [1]int{}[int(AtomicNone)-C.IBV_ATOMIC_NONE]
	_ = [1]int{}[int(AtomicHCA)-C.IBV_ATOMIC_HCA]
	_ = [1]int{}[int(AtomicGlob)-C.IBV_ATOMIC_GLOB]
)
