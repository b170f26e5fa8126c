package scoring

import "strconv"

// AppendExplain appends a one-line, header-safe explanation of d to b (no
// fmt, no allocation when b has room), for the plugin's opt-in response
// header or log line:
//
//	chosen=vllm-0 reason=prefix-affinity; vllm-0 w=0.360 a=0 p=0.031 k=7248; vllm-1 w=0 a=0 p=1.250 k=0
//
// Replicas are named by Replica.Name (Addr when empty); costs are seconds
// with millisecond precision; "stale" marks an uncertain snapshot. replicas
// must be the slice passed to Pick.
func (d *Decision) AppendExplain(b []byte, replicas []Replica) []byte {
	addr := func(i int) string {
		switch {
		case i < 0 || i >= len(replicas):
			return "-"
		case replicas[i].Name != "":
			return replicas[i].Name
		}
		return replicas[i].Addr
	}
	b = append(b, "chosen="...)
	b = append(b, addr(d.Index)...)
	b = append(b, " reason="...)
	b = append(b, d.Reason.String()...)
	for i := 0; i < d.NumTop; i++ {
		c := &d.Top[i]
		b = append(b, "; "...)
		b = append(b, addr(c.Index)...)
		b = appendSec(append(b, " w="...), c.WaitSec)
		b = appendSec(append(b, " a="...), c.AdapterSec)
		b = appendSec(append(b, " p="...), c.PrefillSec)
		b = strconv.AppendInt(append(b, " k="...), int64(c.CachedTokens), 10)
		if c.ExternalSec > 0 {
			b = appendSec(append(b, " x="...), c.ExternalSec)
		}
		if c.Stale {
			b = append(b, " stale"...)
		}
	}
	return b
}

func appendSec(b []byte, s float64) []byte {
	if s == 0 {
		return append(b, '0')
	}
	return strconv.AppendFloat(b, s, 'f', 3, 64)
}
