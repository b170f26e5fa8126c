package shared

// KeyWorkerSeq holds the counter worker ids are taken from: the last id
// handed out and the nonce of the worker that took it.
const KeyWorkerSeq = "gpuroute/worker-seq"

// workerSeqLen is the counter's encoding: id u64, nonce u64.
const workerSeqLen = 16

// AppendWorkerSeq appends the counter's encoding: the id taken and the
// taker's nonce. Two workers creating the missing key at once both succeed
// (a set on a missing key ignores CAS), so each re-reads the value and
// keeps the id only when its own nonce is there.
func AppendWorkerSeq(b []byte, id, nonce uint64) []byte {
	return appendU64(appendU64(b, id), nonce)
}

// DecodeWorkerSeq returns the id and nonce encoded in v; ok is false when v
// is not a counter (the next id then starts again at 1).
func DecodeWorkerSeq(v []byte) (id, nonce uint64, ok bool) {
	if len(v) != workerSeqLen {
		return 0, 0, false
	}
	r := reader{b: v}
	return r.u64(), r.u64(), true
}
