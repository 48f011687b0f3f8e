/*
 * lash.pml: the write rules that keep a lash session and its background
 * work consistent, model-checked with SPIN. See doc.go for how each part
 * maps to the Go code and how to run it.
 *
 * JetStream is modelled as what the rules rely on and nothing more: each
 * request is applied by the server in one indivisible step (a compare-and-
 * set either lands or changes nothing), entries are never rewritten, and
 * a read returns a prefix of a subject up to its head. Everything else is
 * the adversary: workers crash between any two requests, leases expire
 * while their holders sleep, a paused holder wakes and writes with what
 * it read before, a commit's reply is lost and the commit lands later,
 * after requests sent after it (a fence too, with -DLATE_FENCE). Safety
 * must hold on every such schedule, because ADR 0005 says it rests on the
 * stream's compare-and-set, never on timing. The adversary's budgets
 * (MAXCRASH, MAXEXPIRE, MAXDELAY, MAXLAPSE) and NW can be raised with -D.
 *
 * Two scenes, so that each check stays small:
 *   default          the session: lease, fence, journal, commit, cursor;
 *   -DSCENE_PROCESS  a trigger delivery starting a process, and the
 *                    process's attempts and single terminal event.
 *
 * Mutants (each removes one rule; SPIN must then find a violation):
 *   -DNO_FENCE        session appends skip Expected-Last-Subject-Sequence
 *   -DNO_FENCE_TOKEN  Fence does not refuse a head written by a newer token
 *   -DNO_JOURNAL_CAS  a record is appended without expected sequence 0
 *   -DNO_REPLAY       a run performs an effect it found in the journal
 *   -DNO_REFENCE      a run goes on after its commit without fencing again
 *   -DNO_CURSOR       a run takes the input its dispatch delivered, not the
 *                     one after the cursor the log's commits carry
 *   -DNO_STAMP        a commit that lost its compare-and-set is refused
 *                     without looking whether it is its own stamp
 *   -DNO_PROC_CAS     (process scene) a process event skips the head CAS
 *   -DNO_DLV_CAS      (process scene) a delivery is reserved without
 *                     expected sequence 0
 */

#ifndef NW
#define NW 2            /* workers (nodes); 3 also checks, more slowly */
#endif

/* ------------------------------------------------------------------ */
#ifndef SCENE_PROCESS

#define NIN 2           /* inputs a client sends, in order */
#ifndef MAXEV
#define MAXEV 10        /* room on the session log; asserted, not assumed */
#endif
#ifndef MAXCRASH
#define MAXCRASH 1      /* budgets of the adversary, shared by all workers */
#endif
#ifndef MAXEXPIRE
#define MAXEXPIRE 1
#endif
#ifndef MAXDELAY
#define MAXDELAY 1
#endif

#define FENCE  1
#define COMMIT 2

/* what a commit reports */
#define OK        1
#define REFUSED   2     /* fenced out or the head moved: nothing written */
#define DIFFERENT 3     /* the turn stands committed with other content */

#ifdef NO_FENCE
#define HEADIS(ex) true
#else
#define HEADIS(ex) (evlen == (ex))
#endif

/* KV bucket LEASES, key sess.<sid>. Renewals are not modelled: they move
 * the revision and carry the token, which no safety rule reads; so the
 * revision of the standing claim is its token. 0: no key. */
byte kvseq;             /* the bucket's sequence: a claim's revision */
byte lrev;
byte lowner;
byte linc;              /* the holder's incarnation when it claimed */
byte inc[NW];           /* a crash starts a new incarnation */

/* Session log lash.sess.<sid>.ev, entries 1..evlen; the head revision is
 * evlen (only the order of one subject matters to its CAS). */
byte evlen;
byte evkind[MAXEV + 1];
byte evtok[MAXEV + 1];
byte evturn[MAXEV + 1];  /* a commit's turn = the input it consumes */
byte evhash[MAXEV + 1];  /* a commit's content hash */

/* Inputs 1..nin are appended and acknowledged (lash.sess.<sid>.in). */
byte nin = 1;

/* Journal: one effect per turn, lash.fx.<sid>.in-<t>.1. jlen counts the
 * messages on the subject, jval is the first one's outcome: readers take
 * the first (effectlog.Journal.first). An outcome is the performing
 * worker's id plus one, so two performances differ, as two model answers
 * may; a commit's content hash is the outcome its turn was fed. */
byte jlen[NIN + 1];
byte jval[NIN + 1];

/* A request whose reply was lost and which lands later, or never: one
 * slot per worker, for fences and commits. */
byte sk[NW];
byte stok[NW];
byte sturn[NW];
byte shash[NW];
byte sex[NW];

byte crashes;
byte expiries;
byte delays;

/* Ghosts: what an observer outside the system knows. */
byte newest;            /* highest token on the log */
byte fencetok;          /* token of the last fence on the log */
byte logcur;            /* last input a commit consumed */
byte consumed[NIN + 1];
int landedOn;           /* bit p: a commit naming head p landed */
byte finished;

inline logAppend(k, tk, tu, h) {
	assert(evlen < MAXEV);
	evlen++;
	evkind[evlen] = k;
	evtok[evlen] = tk;
	evturn[evlen] = tu;
	evhash[evlen] = h;
	/* §9.1: fencing tokens on the log only grow */
	assert(tk >= newest);
	newest = tk;
	if
	:: k == FENCE -> fencetok = tk
	:: else -> skip
	fi;
	printf("MSC: session log %d: kind %d token %d turn %d hash %d\n", evlen, k, tk, tu, h)
}

/* A commit landing on the log, with what §9 says must then hold. */
inline landCommit(tk, tu, h, ex) {
	/* §9.1: one mutating writer: only the holder of the newest fence commits */
	assert(tk == fencetok);
	/* §9.2: of commits racing on one head, at most one lands */
	assert((landedOn & (1 << (ex))) == 0);
	landedOn = landedOn | (1 << (ex));
	/* §9.6: an input is consumed by one turn, and none is skipped */
	assert(consumed[tu] == 0 && tu == logcur + 1);
	consumed[tu] = 1;
	logcur = tu;
	/* §9.4/9.5: the turn committed what the journal holds, so a replay
	 * that reads the journal rebuilds this very commit */
	assert(jlen[tu] > 0 && h == jval[tu]);
	logAppend(COMMIT, tk, tu, h)
}

/* Fence or Refence: a fence marker on the head the writer names. A run
 * whose fence lands right after a commit knows the next turn's journal
 * is empty (state.fresh) without reading it: its "read" is this step, so
 * the ghost saw is taken here. */
inline fenceAt(tk, ex, res) {
	atomic {
		if
		:: HEADIS(ex) -> logAppend(FENCE, tk, 0, 0); res = evlen; saw = (jlen[t] > 0)
		:: else -> res = 0
		fi
	}
}

/* sessionlog.Log.write: the append with its CAS, and on a lost CAS the
 * look at the entry right after the position. The look is a second
 * request in the code; doing it in the same step changes nothing, since
 * an entry once written never changes. A run that commits and goes on
 * trusts the next turn's journal empty from here (without -DNO_REFENCE
 * its fence after the commit takes that over): gotOn notes it. */
inline gotOn(tu) {
	more = (tu < nin);
	if
	:: more -> saw = (jlen[tu + 1] > 0)
	:: else -> skip
	fi
}

inline commitAt(tk, tu, h, ex, res, npos) {
	atomic {
		if
		:: HEADIS(ex) -> landCommit(tk, tu, h, ex); res = OK; npos = evlen; gotOn(tu)
		:: else ->
#ifndef NO_STAMP
			if
			:: evkind[ex + 1] == COMMIT && evturn[ex + 1] == tu && evhash[ex + 1] == h ->
				res = OK; npos = ex + 1; gotOn(tu)
			:: evkind[ex + 1] == COMMIT && evturn[ex + 1] == tu && evhash[ex + 1] != h ->
				res = DIFFERENT
			:: else -> res = REFUSED
			fi
#else
			res = REFUSED
#endif
		fi
	}
}

/* The fold of the log a run trusts (Session.fold): the newest token, the
 * cursor, and the fences since the last commit (state.attempts). */
inline fold() {
	d_step {
		rev = evlen; knew = 0; cur = 0; att = 0; i = 1;
		do
		:: i > evlen -> break
		:: else ->
			if
			:: evtok[i] > knew -> knew = evtok[i]
			:: else -> skip
			fi;
			if
			:: evkind[i] == COMMIT ->
				if
				:: evturn[i] > cur -> cur = evturn[i]
				:: else -> skip
				fi;
				att = 0
			:: else -> att++
			fi;
			i++
		od;
		i = 0
	}
}

/* A crash instead of the next request: local state is gone; the lease
 * and a request in flight stay where they are. The node comes back as a
 * new incarnation, which is its death's proof to claimants. Offered as
 * an alternative to every request, so a crash falls between any two. */
#define CRASH \
	atomic { crashes < MAXCRASH -> crashes++; inc[me]++; RESET; printf("MSC: worker %d crashes\n", me) }; goto top

/* Dead locals are zeroed so that states differing only in them are one. */
#define RESET \
	tok = 0; rev = 0; knew = 0; cur = 0; att = 0; pos = 0; npos = 0; t = 0; out = 0; res = 0; \
	saw = false; fresh = false; replayed = false; more = false

proctype Worker(byte me) {
	byte tok;                       /* fencing token of the lease held */
	byte rev, knew, cur, att;       /* the session as this run folded it */
	byte pos, npos, t, out, res, i;
	bool saw, fresh, replayed, more;

top:
	/* Dispatch hands a worker an input until one run has consumed it
	 * (its message is acknowledged after that): a worker is woken while
	 * an appended input is left, and never otherwise.
	 *
	 * leases.Manager.Claim: create on a free key; the same owner and
	 * incarnation gets its own token back; a holder proven dead (another
	 * incarnation) is replaced at once; anyone else is busy. */
	atomic {
		if
		:: logcur == NIN -> goto done
		:: logcur < nin ->
			if
			:: lrev == 0 || linc != inc[lowner] ->
				kvseq++; lrev = kvseq; lowner = me; linc = inc[me]; tok = kvseq;
				printf("MSC: worker %d claims the lease, token %d\n", me, tok)
			:: lrev != 0 && lowner == me && linc == inc[me] -> tok = lrev;
				printf("MSC: worker %d claims its own lease again, token %d\n", me, tok)
			:: else -> tok = 0
			fi
		fi
	}
	if
	:: tok == 0 -> goto top         /* busy: the input comes back later */
	:: else -> skip
	fi;
	assert(kvseq < 250);
	/* Session.fold. The code trusts a state kept from its last run and
	 * folds only when its fence finds the log moved; a kept state is a
	 * fold taken earlier, which a fold followed by a pause stands for. A
	 * fold after the claim may see fences of newer tokens: the fence's
	 * token rule is what stops this run then. */
	fold();
	printf("MSC: worker %d folds: head %d, newest token %d, cursor %d, fences since commit %d\n", me, rev, knew, cur, att);
#ifndef NO_CURSOR
	if
	:: cur >= nin -> goto release   /* nothing after the cursor: no fence */
	:: else -> t = cur + 1
	fi;
#else
	/* the input of the delivery, consumed or not */
	if
	:: t = 1
	:: nin >= 2 -> t = 2
	fi;
#endif
	fresh = (att == 0);
	/* sessionlog.Log.fence (FenceAfter with the fold's head and token) */
#ifndef NO_FENCE_TOKEN
	if
	:: knew > tok -> printf("MSC: worker %d is fenced out by token %d\n", me, knew); goto release      /* FencedError */
	:: else -> skip
	fi;
#endif
	if
	:: CRASH
	:: knew == tok && rev > 0 ->
		/* the head is this token's own write (its release was lost):
		 * the driver fences again after it, so the turn counts as begun */
		fenceAt(tok, rev, res)
	:: knew != tok || rev == 0 ->
		fenceAt(tok, rev, res)
#ifdef LATE_FENCE
	:: atomic { (knew != tok || rev == 0) && delays < MAXDELAY && sk[me] == 0 ->
		delays++; sk[me] = FENCE; stok[me] = tok; sex[me] = rev };
		goto release                    /* timed out: the run fails */
#endif
	fi;
	rev = 0; knew = 0; cur = 0; att = 0;
	if
	:: res == 0 -> goto release         /* the log moved: the next run reads it */
	:: else -> pos = res; res = 0
	fi;

drive:
	/* drive.run reads the journal once (not at all when fresh); an
	 * effect found there is fed back, others are performed and recorded */
	atomic {
		if
		:: !fresh -> saw = (jlen[t] > 0)
		:: else -> skip
		fi;
#ifndef NO_REPLAY
		replayed = (!fresh && saw);
#else
		replayed = false;
#endif
		if
		:: replayed -> out = jval[t]; printf("MSC: worker %d replays turn %d's effect: %d\n", me, t, out)
		:: else -> skip
		fi
	}
	if
	:: replayed -> replayed = false; saw = false; goto commit
	:: else -> skip
	fi;
	/* §9.5: performing a call the journal held when this run read it (or,
	 * fresh, when its fence proved it empty) is the re-run replay must
	 * never make. A paused run may still perform one recorded after its
	 * read: ADR 0005 calls exclusivity of work best effort. */
	assert(!saw);
	fresh = false;
	/* effectlog.Journal.Record: first writer wins; a loser takes the
	 * winner's outcome */
	if
	:: CRASH
	:: atomic {
#ifndef NO_JOURNAL_CAS
		if
		:: jlen[t] == 0 -> jlen[t] = 1; jval[t] = me + 1; out = me + 1
		:: else -> out = jval[t]
		fi;
		printf("MSC: worker %d performed turn %d's effect; the journal holds %d\n", me, t, jval[t])
#else
		if
		:: jlen[t] == 0 -> jval[t] = me + 1
		:: else -> skip
		fi;
		jlen[t]++;
		out = me + 1;
		printf("MSC: worker %d performed turn %d's effect and recorded %d over %d\n", me, t, out, jval[t])
#endif
	   }
	fi;

commit:
	/* The keeper stops a run whose renewal failed; a paused run does not
	 * know yet and goes on: both must be safe. A commit may also be sent,
	 * lose its reply and land whenever; the client then sends the same
	 * stamp again. */
	if
	:: CRASH
	:: atomic { lrev != tok || lowner != me || linc != inc[me] -> skip }; goto release
	:: atomic { delays < MAXDELAY && sk[me] == 0 ->
		delays++; sk[me] = COMMIT; stok[me] = tok; sturn[me] = t; shash[me] = out; sex[me] = pos;
		printf("MSC: worker %d's commit of turn %d at head %d is delayed; it sends it again\n", me, t, pos) }
	:: skip
	fi;
	commitAt(tok, t, out, pos, res, npos);
	printf("MSC: worker %d commits turn %d (token %d, hash %d) at head %d: result %d\n", me, t, tok, out, pos, res);
	if
	:: res == OK -> skip
	:: res == REFUSED ->
		/* §9.2: the refused commit changed nothing, and cannot later */
		assert(!(evkind[pos + 1] == COMMIT && evtok[pos + 1] == tok && evturn[pos + 1] == t));
		goto release
	:: res == DIFFERENT ->
		/* §9.3/9.4: runs of one turn feed the same journal, so commit the
		 * same content */
		assert(false)
	fi;
	/* §9.3: a success is this stamp, standing once on the log */
	assert(evkind[npos] == COMMIT && evturn[npos] == t && evhash[npos] == out && consumed[t] == 1);
	pos = npos; npos = 0; res = 0; out = 0;
	/* InputAfter(cursor), read in the commit's step (an input's append
	 * commutes with the commit): the run goes on while one is left */
	if
	:: more ->
		t++; fresh = true; more = false;
#ifndef NO_REFENCE
		if
		:: CRASH
		:: fenceAt(tok, pos, res)
		fi;
		if
		:: res == 0 -> goto release
		:: else -> pos = res; res = 0
		fi;
#endif
		goto drive
	:: else -> skip
	fi;

release:
	/* a delete at the held revision: a successor's lease is never cut */
	if
	:: CRASH
	:: atomic { lrev == tok && lowner == me && linc == inc[me] -> lrev = 0; printf("MSC: worker %d releases\n", me) }
	:: skip     /* lost, or not ours any more: the key waits for its TTL */
	fi;
	RESET;
	goto top;

done:
	finished++
}

/* A request that was sent, whose reply was lost, landing late. */
inline deliver(w) {
	atomic {
		sk[w] != 0 ->
		printf("MSC: worker %d's delayed request arrives\n", w);
		if
		:: sk[w] == FENCE && HEADIS(sex[w]) -> logAppend(FENCE, stok[w], 0, 0)
		:: sk[w] == COMMIT && HEADIS(sex[w]) -> landCommit(stok[w], sturn[w], shash[w], sex[w])
		:: else -> skip         /* its CAS fails: the head moved since */
		fi;
		sk[w] = 0; stok[w] = 0; sturn[w] = 0; shash[w] = 0; sex[w] = 0
	}
}

/* The world: the client's second input, a TTL that runs out under a live
 * (paused) holder, late requests. */
active proctype Env() {
end:
	do
	:: atomic { nin < NIN -> nin++ }
	:: atomic { lrev != 0 && expiries < MAXEXPIRE -> expiries++; lrev = 0; printf("MSC: the lease expires under worker %d\n", lowner) }
	:: deliver(0)
	:: deliver(1)
#if NW > 2
	:: deliver(2)
#endif
	od
}

init {
	byte w;
	atomic {
		do
		:: w < NW -> run Worker(w); w++
		:: else -> break
		od
	}
	finished == NW;
	/* §9.6: every acknowledged input consumed, each once */
	assert(logcur == NIN && consumed[1] == 1 && consumed[2] == 1)
}

#else /* SCENE_PROCESS */

/* A signal matches one subscription: its occurrence and its one delivery
 * are reserved on TRIGGERS, and the delivery starts one process, whose
 * id is the delivery's, on PROCESSES. Every node is a router (it may be
 * handed the signal, and sweeps reservations left unstarted) and a
 * process worker (it recovers the process while it has not ended). */

#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef MAXLAPSE
#define MAXLAPSE 1      /* a node's liveness key lapses while it lives on */
#endif
#ifndef MAXP
#define MAXP 8          /* room on the process log; asserted, not assumed */
#endif

#define REG   1         /* registration */
#define START 2         /* started: an attempt, with a token */
#define DONE  3         /* completed: the terminal event */
#define REL   4         /* released: the attempt handed back unfinished */

#ifdef NO_PROC_CAS
#define PHEADIS(h) true
#else
#define PHEADIS(h) (plen == (h))
#endif

/* TRIGGERS: lash.trig.occ.<id> and lash.trig.dlv.<id>, message counts. */
byte occn;
byte dlvn;
bool marked;            /* the delivery's started mark */

/* PROCESSES: lash.proc.<pid>.ev, events 1..plen. */
byte plen;
byte pkind[MAXP + 1];
byte ptok[MAXP + 1];
byte prun[MAXP + 1];    /* a start's runner */
byte pinc[MAXP + 1];    /* and the runner's incarnation */

byte inc[NW];
bool lapsed[NW];        /* shown gone: its node's liveness key is gone */
bool told[NW];          /* its worker was told of the lapse (Worker.Lapsed) */
bool got[NW];           /* the signal was handed to this node */
byte crashes;
byte lapses;

/* Ghosts. */
byte pnewest;           /* newest token on the process log */
byte lastStart;         /* token of the newest start */
byte terminals;
byte finished;

inline pappend(k, tk, r, ri) {
	assert(plen < MAXP);
	plen++;
	pkind[plen] = k;
	ptok[plen] = tk;
	prun[plen] = r;
	pinc[plen] = ri;
	if
	:: k == REG ->
		/* a delivery registers its process once: first on its log */
		assert(plen == 1)
	:: k == START ->
		/* the process lease: each attempt's token is newer than any
		 * before it, so its start fences out every older runner */
		assert(tk > pnewest);
		pnewest = tk;
		lastStart = tk
	:: k == DONE ->
		/* one terminal event, written by the newest attempt's runner */
		assert(terminals == 0 && tk == lastStart);
		terminals++
	:: k == REL ->
		/* only the newest attempt's runner hands it back */
		assert(terminals == 0 && tk == lastStart)
	fi;
	printf("MSC: proc log %d: kind %d token %d by node %d\n", plen, k, tk, r)
}

/* The worker's fold of the process (processes.Process.apply). */
inline pfold() {
	d_step {
		head = plen; newest = 0; ls = 0; lsRun = 0; lsInc = 0; ended = false; rel = false; i = 1;
		do
		:: i > plen -> break
		:: else ->
			if
			:: ptok[i] > newest -> newest = ptok[i]
			:: else -> skip
			fi;
			if
			:: pkind[i] == START -> ls = ptok[i]; lsRun = prun[i]; lsInc = pinc[i]; rel = false
			:: pkind[i] == REL -> rel = true
			:: pkind[i] == DONE -> ended = true
			:: else -> skip
			fi;
			i++
		od;
		i = 0
	}
}

#define PCRASH \
	atomic { crashes < MAXCRASH -> crashes++; inc[me]++; lapsed[me] = false; told[me] = false; got[me] = false; PRESET; \
		printf("MSC: node %d crashes\n", me) }; goto top

#define PRESET \
	head = 0; newest = 0; ls = 0; lsRun = 0; lsInc = 0; mytok = 0; ended = false; rel = false; kind = 0

proctype Node(byte me) {
	byte head, newest, ls, lsRun, lsInc, mytok, kind, i;
	bool ended, rel;

top:
	if
	:: terminals > 0 && marked -> goto done
	:: atomic { !got[me] -> got[me] = true }; goto signal
	:: atomic { dlvn > 0 && !marked -> skip }; goto register   /* Router.Sweep */
	:: atomic { plen > 0 && !lapsed[me] -> pfold() }; goto attempt
	fi;

signal:
	/* triggers.Triggers.Record: the occurrence and its delivery in one
	 * atomic batch, each expecting sequence 0. A second recording (the
	 * signal delivered again, or published again) changes nothing and
	 * goes on to start what the first reserved. */
	if
	:: PCRASH
	:: atomic {
		if
#ifndef NO_DLV_CAS
		:: occn == 0 && dlvn == 0 ->
#else
		:: true ->
#endif
			/* at most one delivery per (occurrence, subscription), forever */
			assert(dlvn == 0);
			occn++; dlvn++;
			printf("MSC: node %d reserves the delivery\n", me)
		:: else -> skip
		fi
	   }
	fi;

register:
	/* Triggers.Start: register the delivery's process (expected sequence
	 * 0; the same registration again is a duplicate), then mark the
	 * delivery started (a CAS on its subject) */
	if
	:: PCRASH
	:: atomic {
		if
		:: plen == 0 -> pappend(REG, 0, me, inc[me])
		:: else -> skip
		fi
	   }
	fi;
	if
	:: PCRASH
	:: atomic { marked = true }
	fi;
	goto top;

attempt:
	/* processes.Recover on the fold: nothing to do once ended; an open
	 * attempt is left to its runner until the runner is shown gone (its
	 * node came back as another incarnation, or its liveness lapsed) */
	if
	:: ended -> PRESET; goto top
	:: !ended && ls != 0 && !rel && lsInc == inc[lsRun] && !lapsed[lsRun] -> PRESET; goto top
	:: else -> skip
	fi;
	/* Registry.startOn: the started event at the fold's head, with a
	 * token one above the newest on the log, is the claim */
	mytok = newest + 1;
	if
	:: PCRASH
	:: atomic {
		if
		:: PHEADIS(head) -> pappend(START, mytok, me, inc[me]); head = plen; told[me] = false
		:: else -> mytok = 0
		fi
	   }
	fi;
	if
	:: mytok == 0 -> PRESET; goto top
	:: else -> skip
	fi;

	/* The work runs. A worker told of its node's lapse stops it and
	 * hands the attempt back (released), as others may take it over; one
	 * paused does not know yet and reports its outcome anyway. */
	if
	:: atomic { told[me] -> told[me] = false; kind = REL }
	:: kind = DONE
	fi;

complete:
	/* Run.Complete / Run.Release: the event with the run's token, checked
	 * on the run's fold (the newest start is its own, not handed back, no
	 * end) and appended at that fold's head; a lost CAS reads the log
	 * again and checks anew. */
	if
	:: PCRASH
	:: atomic {
		if
		:: PHEADIS(head) -> pappend(kind, mytok, me, inc[me]); mytok = 0
		:: else ->
			pfold();
			if
			:: ended || rel || ls != mytok -> mytok = 0     /* ErrTerminal / ErrFenced */
			:: else -> skip                                 /* still ours: try again */
			fi
		fi
	   }
	fi;
	if
	:: mytok != 0 -> goto complete
	:: else -> PRESET; goto top
	fi;

done:
	finished++
}

active proctype PEnv() {
end:
	do
	:: atomic { lapses < MAXLAPSE && !lapsed[0] -> lapses++; lapsed[0] = true; told[0] = true; printf("MSC: node 0 lapses\n") }
	:: atomic { lapses < MAXLAPSE && !lapsed[1] -> lapses++; lapsed[1] = true; told[1] = true; printf("MSC: node 1 lapses\n") }
	/* its next beat lands: the key is its own again (Worker.Alive) */
	:: atomic { lapsed[0] -> lapsed[0] = false }
	:: atomic { lapsed[1] -> lapsed[1] = false }
#if NW > 2
	:: atomic { lapses < MAXLAPSE && !lapsed[2] -> lapses++; lapsed[2] = true; told[2] = true; printf("MSC: node 2 lapses\n") }
	:: atomic { lapsed[2] -> lapsed[2] = false }
#endif
	od
}

init {
	byte w;
	atomic {
		do
		:: w < NW -> run Node(w); w++
		:: else -> break
		od
	}
	finished == NW;
	/* the signal started one process, which ended once */
	assert(dlvn == 1 && pkind[1] == REG && terminals == 1 && marked)
}

#endif
