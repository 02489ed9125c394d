package gang

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// exchanger completes one step for the whole gang: it hands in this worker's contribution and
// returns the combined checksum of every worker's, or an error when the gang cannot complete it.
type exchanger interface {
	exchange(ctx context.Context, step int, contribution string) (string, error)
	close()
}

// PeerLostError says the gang lost a member (or its coordinator) and cannot go on.
type PeerLostError struct{ Reason string }

func (e *PeerLostError) Error() string { return "peer lost: " + e.Reason }

// RejectedError says the coordinator refused to admit this worker.
type RejectedError struct{ Reason string }

func (e *RejectedError) Error() string { return "rejected by the coordinator: " + e.Reason }

// alone is the gang of one: nothing to wait for, no network.
type alone struct{}

func (alone) exchange(_ context.Context, _ int, contribution string) (string, error) {
	return combine([]string{contribution}), nil
}

func (alone) close() {}

// member is a worker's connection to the coordinator after the gang started.
type member struct {
	k           *conn
	peerTimeout time.Duration
}

func (m *member) exchange(ctx context.Context, step int, contribution string) (string, error) {
	if err := m.k.send(message{Type: msgContribution, Step: step, Sum: contribution}, m.peerTimeout); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", &PeerLostError{Reason: fmt.Sprintf("sending the contribution to step %d: %v", step, err)}
	}
	wait := workerWait(m.peerTimeout)
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-timeout.C:
		return "", &PeerLostError{Reason: fmt.Sprintf("no result for step %d within %s", step, wait)}
	case msg, ok := <-m.k.Messages():
		switch {
		case !ok:
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", &PeerLostError{Reason: fmt.Sprintf("connection to the coordinator lost during step %d: %v", step, m.k.Err())}
		case msg.Type == msgAbort:
			return "", &PeerLostError{Reason: msg.Reason}
		case msg.Type != msgResult || msg.Step != step || msg.Sum == "":
			return "", &PeerLostError{Reason: fmt.Sprintf("unexpected %s for step %d while waiting for step %d", msg.Type, msg.Step, step)}
		}
		return msg.Sum, nil
	}
}

// workerWait is how long a worker waits for a step's result. The coordinator gives the step
// peerTimeout from the first contribution and then tells everyone which rank was missing; a worker
// gives it a little longer, so that verdict, not a bare timeout, is what it reports, and it stops on
// its own only when the coordinator itself is gone silent.
func workerWait(peerTimeout time.Duration) time.Duration {
	return peerTimeout + max(peerTimeout/10, time.Second)
}

func (m *member) close() { m.k.Close() }

// joinParams is what join needs besides the hello.
type joinParams struct {
	addr       string
	deadline   time.Time
	retryEvery time.Duration
	timeout    time.Duration // the rendezvous timeout, for messages
	warnf      func(format string, args ...any)
}

// join dials the coordinator until it answers or the deadline passes, introduces this worker and
// waits for the start. A connection that breaks before the start is dialled again (the coordinator's
// pod may have been replaced); a rejection is final.
func join(ctx context.Context, p joinParams, hello message) (*conn, message, error) {
	ctx, cancel := context.WithDeadline(ctx, p.deadline)
	defer cancel()
	var lastErr error
	attempts := 0
	for {
		if attempts > 0 {
			t := time.NewTimer(p.retryEvery)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		attempts++
		if err := ctx.Err(); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err := fmt.Errorf("rendezvous with %s: the gang did not start within %s", p.addr, p.timeout)
				if lastErr != nil {
					err = fmt.Errorf("%w (last error: %w)", err, lastErr)
				}
				return nil, message{}, err
			}
			return nil, message{}, err
		}
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", p.addr)
		if err != nil {
			if attempts == 1 || lastErr == nil || err.Error() != lastErr.Error() {
				p.warnf("rendezvous: dialling %s: %v (retrying every %s)", p.addr, err, p.retryEvery)
			}
			lastErr = err
			continue
		}
		k := newConn(nc)
		if err := k.send(hello, p.timeout); err != nil {
			k.Close()
			lastErr = err
			continue
		}
		select {
		case <-ctx.Done():
			k.Close()
			continue // reported at the top of the loop
		case m, ok := <-k.Messages():
			switch {
			case !ok:
				lastErr = fmt.Errorf("connection closed before the start: %w", k.Err())
				p.warnf("rendezvous: %v; dialling again", lastErr)
				k.Close()
				continue
			case m.Type == msgReject:
				k.Close()
				return nil, message{}, &RejectedError{Reason: m.Reason}
			case m.Type == msgAbort:
				lastErr = fmt.Errorf("the coordinator gave up: %s", m.Reason)
				p.warnf("rendezvous: %v; dialling again", lastErr)
				k.Close()
				continue
			case m.Type != msgStart:
				k.Close()
				return nil, message{}, fmt.Errorf("rendezvous with %s: expected start, got %q", p.addr, m.Type)
			}
			return k, m, nil
		}
	}
}
