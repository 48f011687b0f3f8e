// Package model holds a Promela model of lash's write rules (lash.pml),
// checked exhaustively by SPIN over a bounded world, and the test that
// runs the check (model_test.go). It has no Go API: the model is the
// deliverable, and the test keeps it honest.
//
// # What is modelled
//
// Default scene, one session: NW workers (2) and two inputs, the second
// appended at any time. Each worker loops over the steps of a run:
//
//	Worker, top        leases.Manager.Claim (leases/leases.go), called by
//	                   Session.run (driver.go): KV create on a free key,
//	                   the same owner and incarnation gets its token back,
//	                   a holder proven dead (Manager.dead, liveness.go;
//	                   here: its worker crashed, so another incarnation) is
//	                   replaced at once, anyone else is busy.
//	fold()             Session.fold / logFolder.fold (session.go,
//	                   logfold.go): head, newest token, cursor, fences since
//	                   the last commit (state.attempts, hence state.fresh).
//	fence              sessionlog.Log.FenceAfter / fence (sessionlog/log.go)
//	                   from Session.runTurns (driver.go), with Refence when
//	                   the head is the token's own write.
//	drive              drive.run and drive.effect (drive.go): the journal is
//	                   read once unless the turn is fresh; a recorded
//	                   outcome is fed back, otherwise the effect is
//	                   performed and recorded with effectlog.Journal.Record
//	                   (effectlog/journal.go), first writer wins. One effect
//	                   per turn; its replay key is the turn id in-<input>.
//	commit             Session.commit -> sessionlog.Log.Commit / write:
//	                   the append expecting the run's position, and on a
//	                   lost compare-and-set the look at the entry after it
//	                   (same stamp: success; same turn, other hash:
//	                   CommitConflictError; otherwise refused). Before it,
//	                   the check leases.Manager.Keep (leases/keeper.go)
//	                   makes, which a paused run skips.
//	go on              the loop in Session.runTurns: a run with another
//	                   input after its commit fences again (Refence) and
//	                   runs it as a fresh turn.
//	release            leases.Manager.Release: delete at the held revision.
//	Env                the world: the client's second input (Session.Send),
//	                   a TTL that runs out under a live holder, and a commit
//	                   whose reply was lost landing later (deliver).
//
// Scene -DSCENE_PROCESS: one signal matching one subscription, on NW nodes
// (2), each both router and process worker:
//
//	signal             triggers.Router.Deliver -> Triggers.Record
//	                   (triggers/store.go): occurrence and delivery in one
//	                   atomic batch, each expecting sequence 0.
//	register           Triggers.Start: processes.Registry.Register
//	                   (expected sequence 0; the same content again is a
//	                   duplicate), then the delivery's started mark. The
//	                   top-level sweep branch is Router.Sweep.
//	attempt            processes.Recover (recovery.go) on the worker's
//	                   fold, then Registry.startOn (run.go): a started event
//	                   with token newest+1 at the fold's head is the claim.
//	complete           Run.Complete or Run.Release through
//	                   Registry.appendWith (registry.go) and
//	                   Process.checkWriter (fold.go): the run's token, its
//	                   fold's head, a re-read and re-check on a lost CAS.
//	PEnv               a node's liveness key lapsing while it lives on
//	                   (Node.beat in node.go, Worker.Lapsed and Alive in
//	                   processes/worker.go).
//
// # The adversary
//
// Crashes (between any two requests of a worker), lease expiry under a
// live holder, lapses, and late requests are nondeterministic choices with
// small budgets (MAXCRASH, MAXEXPIRE, MAXDELAY, MAXLAPSE: 1 each). A
// paused holder needs no budget: any worker may sit between two steps
// while others run, then act on what it read before. Message reordering is
// that interleaving plus the late request, which lands after everything
// sent after it, or never.
//
// # The properties (ARCHITECTURE.md §9)
//
// All are assert()s; ghosts (newest, fencetok, logcur, consumed, landedOn,
// saw) record what an observer outside the system knows.
//
//	§9.1  tokens on the session log never go down; a commit lands only
//	      under the token of the newest fence (one mutating writer).
//	§9.2  at most one commit lands naming a given head; a commit reported
//	      refused does not stand on the log.
//	§9.3  a commit reported successful is its own stamp, standing once;
//	      two runs of a turn never commit different content.
//	§9.4  a commit holds the outcome the journal's first record holds.
//	§9.5  a run never performs an effect that was recorded when it read the
//	      journal (or, fresh, when its fence proved the journal empty).
//	§9.6  each input is consumed by one commit, in order; at the end every
//	      input is consumed; and no state wedges (SPIN's invalid end states).
//	procs one reservation per (occurrence, subscription); one registration;
//	      each start's token above all before; one terminal event, and it
//	      and any release written by the newest attempt's runner.
//
// # Abstracted away
//
// Lease renewal (it moves the revision and carries the token; the model
// keeps revision = token), lease margins and clocks (a holder's trust is
// any choice), the KV create's retry loop, kept states (a kept state is a
// fold taken earlier: a fold then a pause), the dedupe window of msg ids
// (a retried commit always takes the harder path: the lost CAS and the
// look after the position), snapshots, consumes, settings fingerprints,
// ADR 0027 attribution, in-doubt tool calls, several effects per turn,
// subscriptions' own CAS, cancel and abandon requests, owner-bound and
// externally owned work, and payloads. Reads return a consistent prefix
// of a subject, as JetStream's do.
//
// # Running it by hand
//
//	apt-get install spin gcc
//	cd model && spin -a lash.pml && cc -O2 -DSAFETY -o pan pan.c && ./pan -m100000
//	spin -a -DSCENE_PROCESS lash.pml && cc -O2 -DSAFETY -o pan pan.c && ./pan -m100000
//
// Add -DNO_FENCE (or any mutant named in lash.pml) to spin -a to see a
// violation; replay the trail with the same flags and read the MSC lines:
//
//	spin -t -DNO_FENCE lash.pml | grep -E 'MSC|assert'
//
// For the shortest trail compile with -DREACH and run ./pan -i. Larger
// worlds check too, in tens of seconds and a few GB: -DNW=3,
// -DMAXCRASH=2, -DMAXEXPIRE=2, -DLATE_FENCE (a late fence as well as a
// late commit), and for the process scene -DMAXCRASH=2 -DMAXLAPSE=2
// -DMAXP=14. go test ./model/ runs the default checks and every mutant; it
// skips when spin or cc is missing unless LASH_REQUIRE_SPIN=1.
package model
