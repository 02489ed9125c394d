package gang

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"
)

// coordinator runs in the rank-0 worker's process. It admits the gang, tells it where to resume,
// and combines every step's contributions; when any member is lost it ends the whole gang at once,
// so no survivor waits out its own timeout or trains alone.
type coordinator struct {
	workers           int
	steps             int
	workID            string
	rendezvousTimeout time.Duration
	peerTimeout       time.Duration
	logf              func(format string, args ...any)

	ln     net.Listener
	events chan peerEvent
	done   chan struct{}
}

// peerEvent is something that happened on one connection: it was accepted (neither msg nor ended),
// a message arrived, or it ended.
type peerEvent struct {
	p     *peer
	msg   message
	isMsg bool
	ended bool
}

// peer is one accepted connection; rank is -1 until its hello is accepted.
type peer struct {
	k    *conn
	rank int
}

func newCoordinator(ln net.Listener, cfg Config, logf func(string, ...any)) *coordinator {
	return &coordinator{
		workers: cfg.Workers, steps: cfg.Steps, workID: cfg.WorkID,
		rendezvousTimeout: cfg.RendezvousTimeout, peerTimeout: cfg.PeerTimeout, logf: logf,
		ln: ln, events: make(chan peerEvent), done: make(chan struct{}),
	}
}

// errGangLost is wrapped by the error the coordinator returns when it aborted the gang.
var errGangLost = errors.New("gang aborted")

// run serves the gang until every worker has the last step's result and has hung up, the gang is
// aborted, or ctx ends. It always closes the listener and every connection before it returns.
//
//nolint:gocognit // the gang protocol's state machine: one select case per event, the phase transitions side by side
func (c *coordinator) run(ctx context.Context) error {
	conns := map[*peer]bool{}
	defer func() {
		close(c.done)
		c.ln.Close()
		for p := range conns {
			p.k.Close()
		}
	}()
	go c.accept()

	members := make([]*peer, c.workers)
	hellos := make([]message, c.workers)
	joined := 0
	const (
		phaseRendezvous = iota
		phaseStepping
		phaseFinishing
	)
	phase := phaseRendezvous
	rendezvous := time.NewTimer(c.rendezvousTimeout)
	defer rendezvous.Stop()
	var stepTimeout, finishTimeout <-chan time.Time

	step := 0 // the step whose contributions are being collected
	contribs := make([]string, c.workers)
	received := 0

	// abort tells every member why, then closes every connection.
	abort := func(reason string) error {
		c.logf("coordinator: aborting the gang: %s", reason)
		for _, p := range members {
			if p != nil {
				_ = p.k.send(message{Type: msgAbort, Reason: reason}, time.Second)
			}
		}
		return fmt.Errorf("%w: %s", errGangLost, reason)
	}
	broadcast := func(m message) error {
		for _, p := range members {
			if err := p.k.send(m, c.peerTimeout); err != nil {
				return abort(fmt.Sprintf("sending %s to rank %d: %v", m.Type, p.rank, err))
			}
		}
		return nil
	}
	beginStep := func(s int) {
		step = s
		clear(contribs)
		received = 0
		stepTimeout = nil
		if s > c.steps {
			phase = phaseFinishing
			finishTimeout = time.After(c.peerTimeout)
		}
	}

	for {
		select {
		case <-ctx.Done():
			return abort("the coordinator (rank 0) was interrupted")
		case <-rendezvous.C:
			if phase == phaseRendezvous {
				return abort(fmt.Sprintf("only %d of %d workers joined within %s", joined, c.workers, c.rendezvousTimeout))
			}
		case <-stepTimeout:
			var missing []int
			for r, s := range contribs {
				if s == "" {
					missing = append(missing, r)
				}
			}
			return abort(fmt.Sprintf("step %d: no contribution from rank %v within %s", step, missing, c.peerTimeout))
		case <-finishTimeout:
			return nil // every worker has its last result; one that has not hung up yet does not matter
		case ev := <-c.events:
			p := ev.p
			switch {
			case !ev.isMsg && !ev.ended: // accepted
				conns[p] = true
				if phase != phaseRendezvous {
					_ = p.k.send(message{Type: msgReject, Reason: "the gang has already started"}, time.Second)
					p.k.Close()
				}
			case ev.ended:
				delete(conns, p)
				p.k.Close()
				if p.rank < 0 || members[p.rank] != p {
					continue
				}
				switch phase {
				case phaseRendezvous:
					// It may come back (a restarted pod); until then the gang is one short.
					c.logf("coordinator: rank %d left before the gang started: %v", p.rank, p.k.Err())
					members[p.rank] = nil
					joined--
				case phaseStepping:
					members[p.rank] = nil
					return abort(fmt.Sprintf("lost rank %d during step %d: %v", p.rank, step, p.k.Err()))
				case phaseFinishing:
					members[p.rank] = nil
					joined--
					if joined == 0 {
						return nil
					}
				}
			case p.rank < 0: // the first message of a connection must be an acceptable hello
				if reason := c.admit(ev.msg, members); reason != "" {
					c.logf("coordinator: rejected a worker from %s: %s", p.k.c.RemoteAddr(), reason)
					_ = p.k.send(message{Type: msgReject, Reason: reason}, time.Second)
					p.k.Close()
					continue
				}
				p.rank = ev.msg.Rank
				members[p.rank] = p
				hellos[p.rank] = ev.msg
				joined++
				c.logf("coordinator: rank %d joined from %s (%d of %d)", p.rank, p.k.c.RemoteAddr(), joined, c.workers)
				if joined < c.workers {
					continue
				}
				start := planStart(hellos)
				if err := broadcast(start); err != nil {
					return err
				}
				phase = phaseStepping
				beginStep(start.ResumeStep + 1)
			default: // a member's message after the start
				m := ev.msg
				if phase != phaseStepping || m.Type != msgContribution || m.Step != step || m.Sum == "" || contribs[p.rank] != "" {
					return abort(fmt.Sprintf("rank %d sent an unexpected %s for step %d while the gang is at step %d", p.rank, m.Type, m.Step, step))
				}
				contribs[p.rank] = m.Sum
				received++
				if received == 1 {
					stepTimeout = time.After(c.peerTimeout)
				}
				if received < c.workers {
					continue
				}
				if err := broadcast(message{Type: msgResult, Step: step, Sum: combine(contribs)}); err != nil {
					return err
				}
				beginStep(step + 1)
			}
		}
	}
}

// admit returns why hello cannot join the gang, or "" when it can.
func (c *coordinator) admit(hello message, members []*peer) string {
	switch {
	case hello.Type != msgHello:
		return fmt.Sprintf("expected hello, got %q", hello.Type)
	case hello.Version != protocolVersion:
		return fmt.Sprintf("protocol version %d, the coordinator speaks %d", hello.Version, protocolVersion)
	case hello.Workers != c.workers:
		return fmt.Sprintf("wrong world size: rank %d was started with --workers %d, the coordinator with %d", hello.Rank, hello.Workers, c.workers)
	case hello.Rank < 0 || hello.Rank >= c.workers:
		return fmt.Sprintf("rank %d is out of range for %d workers", hello.Rank, c.workers)
	case hello.WorkID != c.workID:
		return fmt.Sprintf("wrong work: rank %d works on %q, the gang on %q", hello.Rank, hello.WorkID, c.workID)
	case hello.Steps != c.steps:
		return fmt.Sprintf("rank %d was started with --steps %d, the coordinator with %d", hello.Rank, hello.Steps, c.steps)
	case members[hello.Rank] != nil:
		return fmt.Sprintf("duplicate rank %d: another worker already joined as rank %d", hello.Rank, hello.Rank)
	}
	return ""
}

// planStart decides where the gang resumes: the newest step for which every rank holds a valid
// checkpoint. The attempt number follows the restart count those checkpoints carry: a gang that
// resumes is attempt restarts+2 (the one that wrote them was restarts+1), a fresh gang attempt 1.
func planStart(hellos []message) message {
	common := map[int]int{} // step → highest restart count among the ranks holding it
	for _, ck := range hellos[0].Checkpoints {
		common[ck.Step] = ck.Restarts
	}
	for _, h := range hellos[1:] {
		held := map[int]int{}
		for _, ck := range h.Checkpoints {
			held[ck.Step] = ck.Restarts
		}
		for step, restarts := range common {
			r, ok := held[step]
			if !ok {
				delete(common, step)
				continue
			}
			common[step] = max(restarts, r)
		}
	}
	if len(common) == 0 {
		return message{Type: msgStart, Attempt: 1}
	}
	steps := make([]int, 0, len(common))
	for s := range common {
		steps = append(steps, s)
	}
	resume := slices.Max(steps)
	return message{Type: msgStart, ResumeStep: resume, Resumed: true, Attempt: common[resume] + 2}
}

// accept admits connections until the listener is closed.
func (c *coordinator) accept() {
	for {
		nc, err := c.ln.Accept()
		if err != nil {
			return // closed by run
		}
		p := &peer{k: newConn(nc), rank: -1}
		select {
		case c.events <- peerEvent{p: p}:
		case <-c.done:
			p.k.Close()
			return
		}
		go c.forward(p)
	}
}

// forward hands p's messages, then its end, to run.
func (c *coordinator) forward(p *peer) {
	for m := range p.k.Messages() {
		select {
		case c.events <- peerEvent{p: p, msg: m, isMsg: true}:
		case <-c.done:
			p.k.Close()
			return
		}
	}
	select {
	case c.events <- peerEvent{p: p, ended: true}:
	case <-c.done:
	}
}
