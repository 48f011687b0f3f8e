package processes

import "sync"

// slots bounds the attempts a worker runs at once, per class and in all,
// and remembers the processes turned away, so the one that waited longest
// is looked at again as soon as a slot of its class frees.
type slots struct {
	mu      sync.Mutex
	max     int
	total   int
	used    map[string]int
	waiting map[string][]string // per class, in the order turned away
}

func newSlots(max int) slots {
	return slots{max: max, used: map[string]int{}, waiting: map[string][]string{}}
}

// take takes a slot of class (at most limit of them) for pid, or notes pid
// as waiting for one.
func (s *slots) take(class string, limit int, pid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used[class] < limit && s.total < s.max {
		s.used[class]++
		s.total++
		return true
	}
	q := s.waiting[class]
	for _, id := range q {
		if id == pid {
			return false
		}
	}
	// The queue is a hint, bounded: the sweep finds whatever it drops.
	if len(q) < 4096 {
		s.waiting[class] = append(q, pid)
	}
	return false
}

// tryTake takes a slot of class if one is free and no process of the
// class waits for one.
func (s *slots) tryTake(class string, limit int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting[class]) > 0 || s.used[class] >= limit || s.total >= s.max {
		return false
	}
	s.used[class]++
	s.total++
	return true
}

// give frees a slot of class and returns a process waiting for one, or "".
// A slot freed with every class full goes to whichever class waited: the
// bound in all was what held it.
func (s *slots) give(class string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.used[class]--; s.used[class] == 0 {
		delete(s.used, class)
	}
	if next := s.pop(class); next != "" {
		return next
	}
	for c := range s.waiting {
		return s.pop(c)
	}
	return ""
}

func (s *slots) pop(class string) string {
	q := s.waiting[class]
	if len(q) == 0 {
		return ""
	}
	next := q[0]
	if len(q) == 1 {
		delete(s.waiting, class)
	} else {
		s.waiting[class] = q[1:]
	}
	return next
}
