// Package prefix is gpuroute's prefix identity without a tokenizer: a
// prompt's text cut into fixed-size character blocks and hashed as a chain
// keyed by model and adapter ([Hasher]), a memo of long strings met before
// so their blocks are replayed instead of hashed again ([Memo]), and the
// index of which replica holds which chain, sized to the fleet's KV cache
// ([Index]). It also holds the stable 64-bit hash every gateway computes
// the same way ([HashString], [Rendezvous]).
//
//	var h prefix.Hasher
//	h.Init(prefix.DefaultBlockChars, 0)
//	h.Reset(model, adapter)
//	h.Write(promptText)
//	index.Lookup(h.Chain(), cached) // cached[i]: tokens of the prompt believed cached on replica i
//	index.Record(chosen, h.Chain())
//
// Standard library only; it builds for GOOS=wasip1 and allocates nothing per
// request in steady state.
package prefix
