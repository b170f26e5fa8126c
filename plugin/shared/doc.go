// Package shared holds the state that gpuroute's worker VMs share through
// proxy-wasm shared data, as pure codecs and decisions over bytes and numbers:
// the scraped fleet Snapshot, the scraping leader's Lease, each worker's
// in-flight WorkRecord with the Registry of workers, and the local Outbox of
// dispatched prefix chains. It knows no ABI: the router does the get/set
// calls and passes the bytes and CAS numbers in.
// Across gateways, each Journal (KeyJournal) is served to peers as a PeerExport.
//
//	var snap shared.Snapshot                   // leader: one per VM, reused
//	snap.SetLen(len(replicas))
//	snap.Replicas[i].ApplySample(&sample, now) // or ApplyFailure on a failed scrape
//	buf, _ = snap.AppendBinary(buf[:0])       // set(shared.KeySnapshot, buf, cas)
//	changed, err := cache.Update(cas, value)  // readers: decodes only when cas changed
//
// Envoy runs one VM per worker thread; shared data is a process-wide map
// copied on every read, and a set with a nonzero CAS on an existing key must
// match while a set on a missing key always succeeds (ABI.md §3.2). LeaseStep
// documents the leader protocol built on that; DESIGN.md §3 the overall state
// design.
//
// Every encoding starts with a 4-byte magic and a version byte, is
// little-endian, checks every length before reading or allocating, and is
// canonical (decoding then encoding gives back the same bytes; trailing bytes
// are an error). Decoders never panic, leave the receiver unchanged on error,
// and reuse the receiver's slices and strings, so steady-state ticks allocate
// nothing. The package links no fmt, os, reflect or encoding/binary (the wasm
// module must not; STYLE.md 23).
package shared
