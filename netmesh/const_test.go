package netmesh

import (
	"testing"

	"github.com/goshmem/goshmem/heap"
)

// Wire constants are part of the protocol: changing one is a new version.
func TestConst(t *testing.T) {
	pins := []struct {
		name      string
		got, want int
	}{
		{"Version", Version, 0x02},
		{"MaxPayload", MaxPayload, 16 << 20},
		{"MaxErrorText", MaxErrorText, 512},
		{"MaxOutstanding", MaxOutstanding, 1 << 20},

		{"typePut", typePut, 0x01},
		{"typeGet", typeGet, 0x02},
		{"typeGetResp", typeGetResp, 0x03},
		{"typeAtomic", typeAtomic, 0x04},
		{"typeAtomicResp", typeAtomicResp, 0x05},
		{"typePutSignal", typePutSignal, 0x06},
		{"typeFlush", typeFlush, 0x07},
		{"typeFlushReply", typeFlushReply, 0x08},
		{"typeHeartbeat", typeHeartbeat, 0x09},
		{"typeGoodbye", typeGoodbye, 0x0A},
		{"typeError", typeError, 0x0B},

		{"prefixLen", prefixLen, 2},
		{"putHdrLen", putHdrLen, 14},
		{"getHdrLen", getHdrLen, 18},
		{"getRespHdrLen", getRespHdrLen, 12},
		{"atomicHdrLen", atomicHdrLen, 32},
		{"atomicRespHdrLen", atomicRespHdrLen, 16},
		{"putSignalHdrLen", putSignalHdrLen, 32},
		{"flushHdrLen", flushHdrLen, 8},
		{"flushReplyHdrLen", flushReplyHdrLen, 8},
		{"heartbeatHdrLen", heartbeatHdrLen, 2},
		{"goodbyeHdrLen", goodbyeHdrLen, 2},
		{"errorHdrLen", errorHdrLen, 6},
		{"maxHdrLen", maxHdrLen, 32},
		{"signalSet", signalSet, 0x01},
		{"signalAdd", signalAdd, 0x02},
		{"statusOK", statusOK, 0x00},

		{"codeVersion", codeVersion, 1},
		{"codeType", codeType, 2},
		{"codeMalformed", codeMalformed, 3},
		{"codeBounds", codeBounds, 4},
		{"codeLength", codeLength, 5},
		{"codeAtomic", codeAtomic, 6},
		{"codeResponse", codeResponse, 7},
		{"codeOutstanding", codeOutstanding, 8},

		{"hsHello", hsHello, 0x01},
		{"hsReply", hsReply, 0x02},
		{"hsAccept", hsAccept, 0x04},
		{"hsRefuse", hsRefuse, 0x05},
		{"hsPrefixLen", hsPrefixLen, 8},
		{"helloFixedLen", helloFixedLen, 32},
		{"replyLen", replyLen, 24},
		{"acceptLen", acceptLen, 8},
		{"refuseLen", refuseLen, 8},
		{"maxJobID", maxJobID, 255},
		{"refuseVersion", refuseVersion, 1},
		{"refuseJob", refuseJob, 2},
		{"refuseRank", refuseRank, 3},
		{"refuseStreams", refuseStreams, 4},
		{"refuseAuth", refuseAuth, 5},
		{"refuseDuplicate", refuseDuplicate, 6},
		{"refuseClosing", refuseClosing, 7},
		{"refuseMalformed", refuseMalformed, 8},

		// The atomic op codes travel in ATOMIC frames.
		{"OpFetch", int(OpFetch), 0x01},
		{"OpSet", int(OpSet), 0x02},
		{"OpSwap", int(OpSwap), 0x03},
		{"OpCSwap", int(OpCSwap), 0x04},
		{"OpFetchAdd", int(OpFetchAdd), 0x05},
		{"OpFetchAnd", int(OpFetchAnd), 0x06},
		{"OpFetchOr", int(OpFetchOr), 0x07},
		{"OpFetchXor", int(OpFetchXor), 0x08},
	}
	for _, p := range pins {
		if p.got != p.want {
			t.Errorf("%s = %#x, want %#x", p.name, p.got, p.want)
		}
	}
	if hsMagic != "GSNM" || labelMesh != "goshmem-netmesh-v2" {
		t.Error("handshake magic or labels changed")
	}

	// Each encoder produces exactly its declared header length, and the
	// length functions agree.
	lens := []struct {
		name      string
		got, want int
	}{
		{"PUT", len(appendPut(nil, 1, 2)), putHdrLen},
		{"GET", len(appendGet(nil, 1, 2, 3)), getHdrLen},
		{"GET_RESP", len(appendGetResp(nil, 1, 0, 2)), getRespHdrLen},
		{"ATOMIC", len(appendAtomic(nil, 1, 1, 8, 0, 0, 0)), atomicHdrLen},
		{"ATOMIC_RESP", len(appendAtomicResp(nil, 1, 0, 0)), atomicRespHdrLen},
		{"PUT_SIGNAL", len(appendPutSignal(nil, 0, 1, 0, 1, 0)), putSignalHdrLen},
		{"FLUSH", len(appendFlush(nil, 1)), flushHdrLen},
		{"FLUSH_REPLY", len(appendFlushReply(nil, 1)), flushReplyHdrLen},
		{"HEARTBEAT", len(appendHeartbeat(nil)), heartbeatHdrLen},
		{"GOODBYE", len(appendGoodbye(nil)), goodbyeHdrLen},
		{"ERROR", len(appendError(nil, 1, "")), errorHdrLen},
		{"putLen", putLen(5), putHdrLen + 5},
		{"getLen", getLen(), getHdrLen},
		{"getRespLen", getRespLen(5), getRespHdrLen + 5},
		{"atomicLen", atomicLen(), atomicHdrLen},
		{"atomicRespLen", atomicRespLen(), atomicRespHdrLen},
		{"putSignalLen", putSignalLen(5), putSignalHdrLen + 5},
		{"flushLen", flushLen(), flushHdrLen},
		{"flushReplyLen", flushReplyLen(), flushReplyHdrLen},
		{"heartbeatLen", heartbeatLen(), heartbeatHdrLen},
		{"goodbyeLen", goodbyeLen(), goodbyeHdrLen},
		{"errorLen", errorLen(5), errorHdrLen + 5},
		{"errorLen cut", errorLen(MaxErrorText + 10), errorHdrLen + MaxErrorText},
		{"HELLO", len(appendHello(nil, &hello{jobID: "abc"})), helloLen(3)},
		{"REPLY", len(appendReply(nil, &reply{})), replyLength()},
		{"ACCEPT", len(appendAccept(nil)), acceptLen},
		{"REFUSE", len(appendRefuse(nil, 1)), refuseLen},
	}
	for _, l := range lens {
		if l.got != l.want {
			t.Errorf("%s: %d bytes, want %d", l.name, l.got, l.want)
		}
	}
	for ty := 0; ty < 256; ty++ {
		if n := hdrLen(byte(ty)); n > maxHdrLen {
			t.Errorf("type %#x header %d > maxHdrLen", ty, n)
		}
	}
}

// The test PEs' Atomics (heapAtomics) convert an op by a cast, so the
// wire's op codes and heap's must be the same numbers. shmem does not
// rely on it: it maps each op by name.
func TestOpCodesMatchHeap(t *testing.T) {
	for _, p := range []struct {
		wire AtomicOp
		heap heap.AtomicOp
	}{
		{OpFetch, heap.OpFetch}, {OpSet, heap.OpSet}, {OpSwap, heap.OpSwap}, {OpCSwap, heap.OpCSwap},
		{OpFetchAdd, heap.OpFetchAdd}, {OpFetchAnd, heap.OpFetchAnd}, {OpFetchOr, heap.OpFetchOr}, {OpFetchXor, heap.OpFetchXor},
	} {
		if byte(p.wire) != byte(p.heap) {
			t.Errorf("%v is 0x%02x on the wire and 0x%02x in heap", p.wire, byte(p.wire), byte(p.heap))
		}
	}
}
