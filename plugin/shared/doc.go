// Package shared holds the state that gpuroute's worker VMs share through
// proxy-wasm shared data, as pure codecs and decisions over bytes and numbers:
// the scraped fleet Snapshot, the scraping leader's Lease, each worker's
// in-flight WorkRecord with the Registry of workers, the PrefixShare of the
// prefix index, LoRA AdapterRecords, the passive health Suspects, and the
// local Outbox of dispatched prefix chains. Across gateways, each Journal
// (KeyJournal) is served to peers as a PeerExport. It knows no ABI: the
// router does the get/set calls and passes the bytes and CAS numbers in.
//
//	var snap shared.Snapshot                   // leader: one per VM, reused
//	snap.SetLen(len(replicas))
//	snap.Replicas[i].ApplySample(&sample, now) // or ApplyFailure on a failed scrape
//	buf, _ = snap.AppendBinary(buf[:0])       // set(shared.KeySnapshot, buf, 0)
//	err = snap.Decode(value)                   // readers, when the value's CAS changed
//
// Envoy runs one VM per worker thread; shared data is a process-wide map
// copied on every read, and a set with a nonzero CAS on an existing key must
// match while a set on a missing key always succeeds (docs/abi.md "Envoy
// behaviour"). LeaseStep documents the leader protocol built on that;
// docs/design.md "Shared state" the overall design.
//
// Every record starts with a 4-byte magic and a version byte (the small
// Suspects and worker counter values have no magic: their keys hold nothing
// else), is
// little-endian, checks every length before reading or allocating, and is
// canonical (decoding then encoding gives back the same bytes; trailing bytes
// are an error). Decoders never panic, leave the receiver unchanged on error,
// and reuse the receiver's slices and strings, so steady-state ticks allocate
// nothing. The package links no fmt, os, reflect or encoding/binary (the wasm
// module must not; plugin/main_test.go).
package shared
