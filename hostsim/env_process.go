package hostsim

// Host functions that reach past the VM: proxy_http_call, shared queues
// and stats, whose state lives in the Host.

import (
	"strconv"
	"time"
)

func hHTTPCall(vm *VM, s []uint64) Status {
	r := vm.curRoot
	if r == nil {
		return StatusBadArgument
	}
	up, ok1 := vm.read(u32(s, 0), u32(s, 1))
	hb, ok2 := vm.read(u32(s, 2), u32(s, 3))
	body, ok3 := vm.read(u32(s, 4), u32(s, 5))
	tb, ok4 := vm.read(u32(s, 6), u32(s, 7))
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return StatusInvalidMemoryAccess
	}
	hdrs, err1 := DecodePairs(hb)
	trailers, err2 := DecodePairs(tb)
	if err1 != nil || err2 != nil {
		return StatusBadArgument
	}
	h := vm.host
	h.mu.Lock()
	c := h.clusters[string(up)]
	now := h.now
	h.mu.Unlock()
	if c == nil {
		return StatusBadArgument
	}
	req := &CallRequest{
		Cluster:  string(up),
		Headers:  lowerHeaders(hdrs),
		Body:     append([]byte(nil), body...),
		Trailers: lowerHeaders(trailers),
		Timeout:  time.Duration(u32(s, 8)) * time.Millisecond,
		Now:      now,
		VMID:     vm.id,
	}
	hm := headerMap{kv: req.Headers}
	var ok bool
	if req.Method, ok = hm.get(headerMethod); !ok {
		return StatusBadArgument
	}
	if req.Path, ok = hm.get(headerPath); !ok {
		return StatusBadArgument
	}
	if req.Authority, ok = hm.get(headerAuthority); !ok {
		return StatusBadArgument
	}
	vm.nextCallID++
	if vm.nextCallID == 0 {
		vm.nextCallID++
	}
	token := vm.nextCallID
	if st := vm.putU32(u32(s, 9), token); st != StatusOK {
		return st
	}
	reply := c.Handle(req)
	resp := &callResponse{}
	at := now + reply.Latency
	if reply.NoAnswer || (req.Timeout > 0 && reply.Latency > req.Timeout) {
		if req.Timeout == 0 {
			return StatusOK // Envoy would wait forever
		}
		resp.failed = true
		at = now + req.Timeout
	} else {
		resp.status = reply.Status
		if resp.status == 0 {
			resp.status = 200
		}
		resp.headers = append([][2]string{{headerStatus, strconv.Itoa(resp.status)}}, lowerHeaders(reply.Headers)...)
		resp.body = append([]byte(nil), reply.Body...)
		resp.trailers = lowerHeaders(reply.Trailers)
	}
	h.mu.Lock()
	h.scheduleLocked(at, func() error { return vm.deliverCallResponse(r, token, resp) })
	h.mu.Unlock()
	return StatusOK
}

func (vm *VM) deliverCallResponse(r *Root, token uint32, resp *callResponse) error {
	vm.mu.Lock()
	defer vm.unlock()
	// Envoy cancels a root's pending calls when the root goes away.
	if vm.usable() != nil || r.deleted {
		return nil
	}
	return vm.withContext(r, nil, func() error {
		vm.callResp = resp
		defer func() { vm.callResp = nil }()
		_, err := vm.invoke(fnOnHTTPCallResponse, 0, 5, uint64(r.id), uint64(token),
			uint64(len(resp.headers)), uint64(len(resp.body)), uint64(len(resp.trailers)))
		return err
	})
}

func hRegisterQueue(vm *VM, s []uint64) Status {
	r := vm.curRoot
	if r == nil {
		return StatusBadArgument
	}
	name, ok := vm.read(u32(s, 0), u32(s, 1))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	h := vm.host
	h.mu.Lock()
	key := queueKey{vm.id, string(name)}
	q := h.qByName[key]
	if q == nil {
		q = &queue{id: uint32(len(h.queues) + 1), key: key}
		h.queues = append(h.queues, q)
		h.qByName[key] = q
	}
	// The registering root receives proxy_on_queue_ready from now on.
	q.owner, q.root = vm, r.id
	h.mu.Unlock()
	return vm.putU32(u32(s, 2), q.id)
}

func (h *Host) queueLocked(id uint32) *queue {
	if id == 0 || int(id) > len(h.queues) {
		return nil
	}
	return h.queues[id-1]
}

func hEnqueue(vm *VM, s []uint64) Status {
	v, ok := vm.read(u32(s, 1), u32(s, 2))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	h := vm.host
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queueLocked(u32(s, 0))
	if q == nil {
		return StatusNotFound
	}
	q.items = append(q.items, append([]byte(nil), v...))
	owner, rootID, qid := q.owner, q.root, q.id
	// cpp-host posts on_queue_ready to the registering VM's thread.
	h.scheduleLocked(h.now, func() error { return owner.deliverQueueReady(rootID, qid) })
	return StatusOK
}

func (vm *VM) deliverQueueReady(rootID, qid uint32) error {
	vm.mu.Lock()
	defer vm.unlock()
	r := vm.roots[rootID]
	if vm.usable() != nil || r == nil {
		return nil
	}
	return vm.withContext(r, nil, func() error {
		_, err := vm.invoke(fnOnQueueReady, 0, 2, uint64(rootID), uint64(qid), 0, 0, 0)
		return err
	})
}

func hDefineMetric(vm *VM, s []uint64) Status {
	t := MetricType(u32(s, 0))
	if t > MetricHistogram {
		return StatusBadArgument
	}
	name, ok := vm.read(u32(s, 1), u32(s, 2))
	if !ok {
		return StatusInvalidMemoryAccess
	}
	h := vm.host
	h.mu.Lock()
	m := h.metrics[string(name)]
	if m == nil {
		m = &metric{name: string(name), typ: t}
		h.metrics[m.name] = m
	} else if m.typ != t {
		h.mu.Unlock()
		return StatusBadArgument
	}
	// Envoy hands out a fresh id per definition with the type in the low
	// bits; the stat behind it is the same for the same name.
	vm.nextMetricID++
	id := vm.nextMetricID<<2 | uint32(t)
	vm.metricIDs[id] = m
	h.mu.Unlock()
	return vm.putU32(u32(s, 3), id)
}

func (vm *VM) updateMetric(id uint32, v int64, record bool) Status {
	h := vm.host
	h.mu.Lock()
	defer h.mu.Unlock()
	m := vm.metricIDs[id]
	if m == nil {
		return StatusNotFound
	}
	switch m.typ {
	case MetricCounter:
		if v < 0 {
			return StatusBadArgument
		}
		m.value += v
	case MetricGauge:
		if record {
			m.value = v
		} else {
			m.value += v
		}
	case MetricHistogram:
		if !record {
			return StatusBadArgument
		}
		m.samples = append(m.samples, uint64(v))
	}
	return StatusOK
}
