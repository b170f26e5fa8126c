package router

import (
	"github.com/gpuroute/gpuroute/plugin/proxy"
	"github.com/gpuroute/gpuroute/plugin/shared"
)

// heldPeers connects the flow control of the worker VMs of one Envoy
// through shared queues (proxy_on_queue_ready runs in the VM whose root
// registered the queue: docs/abi.md "Envoy behaviour"). Each worker
// registers its own wake queue, tells the others when what it holds changes
// (a shared.HeldNotice), and wakes the worker holding the most urgent
// request when a callback of its own frees capacity that none of its held
// requests takes, so that capacity freed by one worker's stream reaches a
// request another holds without waiting for a tick
// (TestFlowWakesAnotherWorker). It owns this worker's queue and the last
// notice of each other worker.
type heldPeers struct {
	r      *root
	vmID   string
	own    uint32 // this worker's queue (0: none registered yet)
	others []heldPeer
	// held and top sum the others' notices: the requests they hold and
	// the highest band among them (-1: none).
	held, top int
	sent      shared.HeldNotice // the last notice this worker sent
	sentOK    bool
	msg       []byte
}

type heldPeer struct {
	shared.HeldNotice
	queue uint32 // its wake queue (0: not resolved yet)
}

func (p *heldPeers) start() {
	p.msg = make([]byte, 0, 64)
	if v, err := proxy.GetProperty([]string{"plugin_vm_id"}); err == nil {
		p.vmID = string(v)
	}
}

// join registers this worker's wake queue once membership gave it an id,
// and keeps an entry for each other listed worker (the tick calls it).
func (p *heldPeers) join(workers []uint64) {
	me := p.r.members.worker
	if me == 0 {
		return
	}
	if p.own == 0 {
		if id, err := proxy.RegisterSharedQueue(shared.WakeQueue(me)); err == nil {
			p.own = id
		}
	}
	kept := p.others[:0]
	for _, o := range p.others {
		if containsWorker(workers, o.Worker) {
			kept = append(kept, o)
		}
	}
	p.others = kept
	for _, w := range workers {
		if w != me && p.find(w) < 0 {
			p.others = append(p.others, heldPeer{HeldNotice: shared.HeldNotice{Worker: w, TopBand: shared.NoBand}})
			p.sentOK = false // tell the new worker what this one holds
		}
	}
	p.sum()
}

func containsWorker(ws []uint64, w uint64) bool {
	for _, x := range ws {
		if x == w {
			return true
		}
	}
	return false
}

func (p *heldPeers) find(w uint64) int {
	for i := range p.others {
		if p.others[i].Worker == w {
			return i
		}
	}
	return -1
}

func (p *heldPeers) sum() {
	p.held, p.top = 0, -1
	for i := range p.others {
		o := &p.others[i]
		p.held += int(o.Held)
		if o.Held > 0 && (p.top < 0 || o.TopBand < p.top) {
			p.top = o.TopBand
		}
	}
}

// announce tells the other workers what this one holds, when that changed
// since the last notice.
func (p *heldPeers) announce(f *flowControl) {
	n := shared.HeldNotice{Worker: p.r.members.worker, Held: uint32(f.held()), TopBand: shared.NoBand}
	if n.Held > 0 {
		n.TopBand = f.topBand()
		n.OldestNanos, _ = f.queue.Oldest(n.TopBand)
	}
	if n.Worker == 0 || p.sentOK && p.sent == n {
		return
	}
	m, err := n.AppendBinary(p.msg[:0])
	if err != nil {
		return
	}
	p.msg = m
	ok := true
	for i := range p.others {
		ok = p.send(i, m) && ok
	}
	p.sent, p.sentOK = n, ok
}

// wake asks the worker holding the most urgent request (the highest band,
// then the oldest) to release.
func (p *heldPeers) wake() {
	best := -1
	for i := range p.others {
		o := &p.others[i]
		if o.Held == 0 {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		if b := &p.others[best]; o.TopBand < b.TopBand || o.TopBand == b.TopBand && o.OldestNanos < b.OldestNanos {
			best = i
		}
	}
	if best >= 0 {
		p.msg = shared.AppendWake(p.msg[:0], p.r.members.worker)
		p.send(best, p.msg)
	}
}

// send enqueues m on other worker i's wake queue, resolving the queue the
// first time (a worker that has not registered yet hears at its next tick).
func (p *heldPeers) send(i int, m []byte) bool {
	o := &p.others[i]
	if o.queue == 0 {
		id, err := proxy.ResolveSharedQueue(p.vmID, shared.WakeQueue(o.Worker))
		if err != nil {
			return false
		}
		o.queue = id
	}
	if err := proxy.EnqueueSharedQueue(o.queue, m); err != nil {
		o.queue = 0
		return false
	}
	return true
}

// drain reads this worker's wake queue: notices update what the others
// hold; it reports whether a wake was among them.
func (p *heldPeers) drain() (woken bool) {
	if p.own == 0 {
		return false
	}
	var n shared.HeldNotice
	for {
		m, err := proxy.DequeueSharedQueue(p.own)
		if err != nil {
			break
		}
		switch {
		case shared.IsWake(m):
			woken = true
		case n.Decode(m) == nil:
			if i := p.find(n.Worker); i >= 0 {
				p.others[i].HeldNotice = n
			}
		}
	}
	p.sum()
	return woken
}
