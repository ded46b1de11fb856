package webhook

import (
	"container/list"
	"sync"
	"time"
)

// deliveries remembers recent delivery ids, bounded in count and age, so a
// replayed delivery is recognised without the memory growing without end.
type deliveries struct {
	mu    sync.Mutex
	max   int
	ttl   time.Duration
	now   func() time.Time
	order *list.List // front: newest
	index map[string]*list.Element
}

type deliveryEntry struct {
	key  string
	seen time.Time
}

func newDeliveries(max int, ttl time.Duration, now func() time.Time) *deliveries {
	return &deliveries{max: max, ttl: ttl, now: now, order: list.New(), index: map[string]*list.Element{}}
}

// firstTime records key and reports whether it was not seen within the TTL.
func (d *deliveries) firstTime(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	// Drop expired entries from the old end.
	for e := d.order.Back(); e != nil; e = d.order.Back() {
		if now.Sub(e.Value.(*deliveryEntry).seen) < d.ttl {
			break
		}
		d.order.Remove(e)
		delete(d.index, e.Value.(*deliveryEntry).key)
	}
	if _, ok := d.index[key]; ok {
		return false
	}
	d.index[key] = d.order.PushFront(&deliveryEntry{key: key, seen: now})
	for d.order.Len() > d.max {
		e := d.order.Back()
		d.order.Remove(e)
		delete(d.index, e.Value.(*deliveryEntry).key)
	}
	return true
}

// forget removes key, so a delivery whose work could not even be queued is
// taken when the provider retries it.
func (d *deliveries) forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.index[key]; ok {
		d.order.Remove(e)
		delete(d.index, key)
	}
}
