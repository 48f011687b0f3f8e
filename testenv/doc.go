// Package testenv runs real, embedded nats-servers with JetStream for tests
// and benchmarks.
//
// The project's rule is that tests use real parts: a journal test talks to a
// real JetStream, not to a fake that agrees with whatever the test expects.
// This package makes that cheap. A single server starts in a few
// milliseconds; a three-node cluster in one process is ready in well under a
// second.
//
//	s := testenv.RunJetStream(t)
//	js, _ := jetstream.New(s.Conn(t))
//
//	c := testenv.RunCluster(t, 3)
//	js, _ := jetstream.New(c.Conn(t)) // fails over when a server stops
//	c.StopServer(0)
//	c.RestartServer(0) // returns once the cluster is whole and current
//
// What the helpers promise:
//
//  1. Every server has JetStream on, file storage under t.TempDir(), NoSigs,
//     and a client listener on 127.0.0.1 so programs outside the test process
//     can connect through URL().
//  2. Everything a helper starts (servers, connections) is shut down in
//     t.Cleanup, and the cleanup waits for the servers to finish shutting
//     down, so the next test starts on a quiet machine.
//  3. Failures are reported through the testing.TB given to the helper, with
//     t.Fatalf. Call the helpers and the Cluster methods from the goroutine
//     running that test, as the testing package requires.
//  4. Nothing waits by sleeping a guessed duration. Readiness is a condition
//     polled by WaitFor, which fails the test at its deadline with the last
//     reason the condition gave.
//
// A cluster is ready ("whole and current") when every running server has
// JetStream enabled, exactly one of them is the meta leader, every running
// server reports that leader, the leader counts every running server among
// its JetStream peers with fresh statistics (so peer placement for replicated
// streams succeeds at once), every running server's meta group is current,
// and every stream a server hosts is current on it.
//
// Two costs come from nats-server, not from this package. A new cluster's
// first meta leader needs the votes of all servers, and two servers that
// campaign at once leave it leaderless for nats-server's 4-9 s election
// timeout; RunCluster notices such a split vote and starts over on new ports
// and empty directories, and logs when it did. And a restarted server waits
// for its Raft leaders' heartbeats, sent every second, so RestartServer takes
// 1-3 s.
//
// WithOptions changes any nats-server option of the servers (a user and
// password, accounts), WithLimits the longest protocol line and the largest
// payload; Server.Reload changes the options of a running server as a
// configuration reload does, which is how a test takes a client's
// credentials away.
//
// Server logs are discarded unless the environment variable
// LASH_TEST_NATS_LOG is set: with LASH_TEST_NATS_LOG=1 they go to t.Logf,
// with LASH_TEST_NATS_LOG=debug nats-server's debug log (Raft votes and
// elections among others) goes there too. A server error that nats-server
// would treat as fatal always fails the test.
//
// RunModelServer serves an OpenAI-compatible Chat Completions API on
// loopback from a provider/scripted script, streaming when asked, and
// counts every request by a hash of its content: the tests' proof that a
// recorded model call was not made again.
package testenv
