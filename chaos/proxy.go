// Package chaos is lash's harness for faults a fleet meets: links that
// partition, slow down or drop, processes paused or killed (issue 35). It
// starts with the link: a TCP proxy a test puts between two parts (a node
// and a server, two servers) to inject faults on demand, each reproducible
// from the seed that drives its jitter.
package chaos

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Direction is which way bytes flow through a proxy: Up from the side
// that connects to the side connected to, Down back.
type Direction uint8

const (
	Up Direction = 1 << iota
	Down
	Both = Up | Down
)

// Proxy forwards the TCP connections made to it to a target and injects
// faults: a partition holds bytes in one direction or both (nothing
// passes, nothing is lost, as packets a healed network delivers late), a
// delay holds each chunk for a while, a cut closes every connection, and
// refusing closes new ones at once.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	parted  Direction
	delay   time.Duration
	jitter  time.Duration
	rng     *rand.Rand
	refuse  bool
	conns   map[net.Conn]struct{}
	closed  bool
	pumping sync.WaitGroup

	stats Stats
}

// Stats counts what a proxy did, for reports and for tests that a fault
// took effect.
type Stats struct {
	Accepted, Refused, Cut atomic.Int64
	// Bytes passed each way; Held counts chunks a partition held, Delayed
	// those a delay held.
	BytesUp, BytesDown, Held, Delayed atomic.Int64
}

// Listen starts a proxy to target on a loopback port of its own. seed
// drives the delays' jitter.
func Listen(target string, seed uint64) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.pumping.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address to connect to instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stats is what the proxy did so far.
func (p *Proxy) Stats() *Stats { return &p.stats }

// Partition holds the bytes going in dir until Heal.
func (p *Proxy) Partition(dir Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parted |= dir
}

// Heal ends every partition: what was held flows on.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parted = 0
	p.cond.Broadcast()
}

// Delay holds each chunk for d plus up to jitter more, drawn from the
// seed; zero ends delays.
func (p *Proxy) Delay(d, jitter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay, p.jitter = d, jitter
}

// Cut closes every open connection, as a reset link does.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		p.stats.Cut.Add(1)
	}
	p.cond.Broadcast()
}

// Refuse makes the proxy close new connections at once (on), or take them
// again (off).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	err := p.ln.Close()
	p.pumping.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.pumping.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		refuse := p.refuse || p.closed
		p.mu.Unlock()
		if refuse {
			p.stats.Refused.Add(1)
			_ = down.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = down.Close() // the target is down: so is the link
			continue
		}
		p.mu.Lock()
		if p.closed { // closed while dialing: Close has passed the conns
			p.mu.Unlock()
			_, _ = down.Close(), up.Close()
			return
		}
		p.stats.Accepted.Add(1)
		p.conns[down], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.pumping.Add(2)
		pair := &pair{a: down, b: up, p: p}
		pair.left.Store(2)
		go p.pump(pair, down, up, Up, &p.stats.BytesUp)
		go p.pump(pair, up, down, Down, &p.stats.BytesDown)
	}
}

// pair is one proxied connection: both sides are closed once both ways
// ended, or at once when one way fails.
type pair struct {
	a, b net.Conn
	p    *Proxy
	left atomic.Int32
	once sync.Once
}

func (c *pair) close() {
	c.once.Do(func() {
		_ = c.a.Close()
		_ = c.b.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c.a)
		delete(c.p.conns, c.b)
		c.p.mu.Unlock()
	})
}

// pump copies from src to dst through the faults of dir. The end of src
// half-closes dst (the other way may still have bytes); a failure closes
// both.
func (p *Proxy) pump(c *pair, src, dst net.Conn, dir Direction, n *atomic.Int64) {
	defer p.pumping.Done()
	defer func() {
		if c.left.Add(-1) == 0 {
			c.close()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if !p.pass(dir) {
				c.close()
				return
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				c.close()
				return
			}
			n.Add(int64(k))
		}
		if errors.Is(err, io.EOF) {
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
		if err != nil {
			c.close()
			return
		}
	}
}

// pass waits out a partition and a delay of dir; false when the proxy
// closed meanwhile.
func (p *Proxy) pass(dir Direction) bool {
	p.mu.Lock()
	if p.parted&dir != 0 {
		p.stats.Held.Add(1)
	}
	for p.parted&dir != 0 && !p.closed {
		p.cond.Wait()
	}
	closed, wait := p.closed, p.delay
	if wait > 0 && p.jitter > 0 {
		wait += time.Duration(p.rng.Int64N(int64(p.jitter)))
	}
	p.mu.Unlock()
	if closed {
		return false
	}
	if wait > 0 {
		p.stats.Delayed.Add(1)
		time.Sleep(wait) // the fault itself: the link is this slow
	}
	return true
}
