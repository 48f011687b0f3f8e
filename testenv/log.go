package testenv

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// logEnv names the environment variable that, set to 1, sends server logs to
// t.Logf; set to debug, it adds nats-server's debug log (Raft elections,
// among others).
const logEnv = "LASH_TEST_NATS_LOG"

// logger is the server.Logger of one embedded server. It always records
// fatal errors, because nats-server's own loggers exit the process on Fatalf
// and no logger at all would hide why a server did not start; it forwards
// everything else to t.Logf only when logEnv is set.
type logger struct {
	t       testing.TB
	name    string
	verbose bool
	debug   bool

	mu     sync.Mutex
	closed bool // set once the server has shut down: t may be finished
	fatal  string
}

func newLogger(t testing.TB, name string) *logger {
	v := os.Getenv(logEnv)
	return &logger{t: t, name: name, verbose: v == "1" || v == "debug", debug: v == "debug"}
}

// fatalError returns the first fatal error the server reported, or nil.
func (l *logger) fatalError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fatal == "" {
		return nil
	}
	return fmt.Errorf("server %s: %s", l.name, l.fatal)
}

// close stops forwarding: the test that owns t may have finished.
func (l *logger) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

func (l *logger) log(level, format string, v []any) {
	if !l.verbose {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	now := time.Now().Format("15:04:05.000000")
	l.t.Logf("%s nats %s %s "+format, append([]any{now, l.name, level}, v...)...)
}

func (l *logger) Noticef(format string, v ...any) { l.log("INF", format, v) }
func (l *logger) Warnf(format string, v ...any)   { l.log("WRN", format, v) }
func (l *logger) Errorf(format string, v ...any)  { l.log("ERR", format, v) }
func (l *logger) Debugf(format string, v ...any)  { l.log("DBG", format, v) }
func (l *logger) Tracef(format string, v ...any)  { l.log("TRC", format, v) }

func (l *logger) Fatalf(format string, v ...any) {
	l.mu.Lock()
	if l.fatal == "" {
		l.fatal = fmt.Sprintf(format, v...)
	}
	l.mu.Unlock()
	l.log("FTL", format, v)
}
