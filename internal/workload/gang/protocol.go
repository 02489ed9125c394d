package gang

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// The wire protocol between the workers and the coordinator: one JSON object per line over TCP.
//
//	worker → coordinator: hello, then one contribution per step
//	coordinator → worker: reject (and close), or start; then one result per step; abort (and close)
//	                      when the gang cannot go on
const protocolVersion = 1

// Message types.
const (
	msgHello        = "hello"
	msgReject       = "reject"
	msgStart        = "start"
	msgContribution = "contribution"
	msgResult       = "result"
	msgAbort        = "abort"
)

// maxMessageBytes bounds one line; a hello with a few checkpoints is well under 1 KiB.
const maxMessageBytes = 64 << 10

// heldCheckpoint is one valid checkpoint a worker announces in its hello.
type heldCheckpoint struct {
	Step     int `json:"step"`
	Restarts int `json:"restarts"`
}

// message is every message of the protocol; Type says which fields are meaningful.
type message struct {
	Type string `json:"type"`

	// hello
	Version     int              `json:"version,omitempty"`
	Rank        int              `json:"rank"`
	Workers     int              `json:"workers,omitempty"`
	Steps       int              `json:"steps,omitempty"`
	WorkID      string           `json:"work_id,omitempty"`
	Checkpoints []heldCheckpoint `json:"checkpoints,omitempty"`

	// start
	ResumeStep int  `json:"resume_step,omitempty"`
	Resumed    bool `json:"resumed,omitempty"`
	Attempt    int  `json:"attempt,omitempty"`

	// contribution, result
	Step int    `json:"step,omitempty"`
	Sum  string `json:"sum,omitempty"`

	// reject, abort
	Reason string `json:"reason,omitempty"`
}

// conn frames messages on a TCP connection. Sends are serialised by a mutex; a single reader
// goroutine started by newConn delivers what arrives on Messages until the connection ends, then
// closes it, after which Err says why it ended.
type conn struct {
	c        net.Conn
	writeMu  sync.Mutex
	messages chan message
	stop     chan struct{}
	stopOnce sync.Once
	err      error // set before messages is closed
}

func newConn(c net.Conn) *conn {
	k := &conn{c: c, messages: make(chan message), stop: make(chan struct{})}
	go k.read()
	return k
}

func (k *conn) read() {
	defer close(k.messages)
	sc := bufio.NewScanner(k.c)
	sc.Buffer(make([]byte, 0, 4096), maxMessageBytes)
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			k.err = fmt.Errorf("unreadable message from %s: %w", k.c.RemoteAddr(), err)
			return
		}
		select {
		case k.messages <- m:
		case <-k.stop:
			k.err = errClosed
			return
		}
	}
	k.err = sc.Err()
	if k.err == nil {
		k.err = errors.New("connection closed by the other side")
	}
}

var errClosed = errors.New("connection closed")

// Messages delivers incoming messages; it is closed when the connection ends.
func (k *conn) Messages() <-chan message { return k.messages }

// Err is why the connection ended; valid once Messages is closed.
func (k *conn) Err() error { return k.err }

// send writes m, giving up after timeout.
func (k *conn) send(m message, timeout time.Duration) error {
	line, err := json.Marshal(m)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	_ = k.c.SetWriteDeadline(time.Now().Add(timeout))
	_, err = k.c.Write(line)
	return err
}

// Close ends the connection and the reader.
func (k *conn) Close() error {
	k.stopOnce.Do(func() { close(k.stop) })
	return k.c.Close()
}
