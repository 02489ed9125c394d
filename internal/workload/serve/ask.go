package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"time"
)

// AskOptions configure Ask.
type AskOptions struct {
	// URL is where the requests go: a gateway's address and the path a route matches.
	URL string
	// Requests is how many requests each set sends.
	Requests int
	// Header, "Name: value", is sent with every request of the second set; empty: one set only.
	Header string
	// ReadyWithin bounds the wait for the first answer of each set: a gateway programs its data plane
	// some time after it accepts a route.
	ReadyWithin time.Duration
}

// Tally is the JSON line Ask prints: how many requests of each set each server answered, and how many
// failed.
type Tally struct {
	Event      string         `json:"event"`
	URL        string         `json:"url"`
	Plain      map[string]int `json:"plain"`
	Header     string         `json:"header,omitempty"`
	WithHeader map[string]int `json:"withHeader,omitempty"`
	Failed     int            `json:"failed"`
	FirstError string         `json:"firstError,omitempty"`
	// ReadyAfter is how long the first answers took.
	ReadyAfter string `json:"readyAfter"`
}

// Tally events.
const (
	TallyEvent    = "tally"
	NotReadyEvent = "not-ready"
)

// Ask sends o.Requests inference requests to o.URL, and as many again with o.Header, once a request of
// each set has been answered, and prints the Tally. A set that had no answer within o.ReadyWithin
// prints a not-ready Tally and returns an error.
func Ask(ctx context.Context, o AskOptions, out io.Writer) error {
	if o.URL == "" || o.Requests <= 0 || o.ReadyWithin <= 0 {
		return errors.New("ask needs a URL, a positive number of requests and a positive --ready-within")
	}
	var hdr http.Header
	if o.Header != "" {
		name, value, ok := strings.Cut(o.Header, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return fmt.Errorf("header %q is not Name: value", o.Header)
		}
		hdr = http.Header{}
		hdr.Set(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	t := Tally{Event: TallyEvent, URL: o.URL, Plain: map[string]int{}, Header: o.Header}
	sets := []http.Header{nil}
	if hdr != nil {
		sets = append(sets, hdr)
		t.WithHeader = map[string]int{}
	}
	began := time.Now()
	for _, h := range sets {
		if err := firstAnswer(ctx, o, h); err != nil {
			t.Event, t.FirstError = NotReadyEvent, err.Error()
			return errors.Join(json.NewEncoder(out).Encode(t), err)
		}
	}
	t.ReadyAfter = time.Since(began).Round(time.Millisecond).String()
	for i, h := range sets {
		counts := t.Plain
		if i == 1 {
			counts = t.WithHeader
		}
		for range o.Requests {
			a, err := askOnce(ctx, o.URL, h)
			if err != nil {
				t.Failed++
				if t.FirstError == "" {
					t.FirstError = err.Error()
				}
				continue
			}
			counts[a.Server]++
		}
	}
	return json.NewEncoder(out).Encode(t)
}

// firstAnswer asks until a request with h is answered, or o.ReadyWithin passes.
func firstAnswer(ctx context.Context, o AskOptions, h http.Header) error {
	ctx, cancel := context.WithTimeout(ctx, o.ReadyWithin)
	defer cancel()
	for {
		_, err := askOnce(ctx, o.URL, h)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer from %s within %s: %w", o.URL, o.ReadyWithin, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// askOnce sends one inference request and reads who answered it.
func askOnce(ctx context.Context, url string, h http.Header) (Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"prompt":"gpuconform"}`))
	if err != nil {
		return Answer{}, err
	}
	maps.Copy(req.Header, h)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return Answer{}, fmt.Errorf("%s answered %s: %.200s", url, resp.Status, body)
	}
	var a Answer
	if err := json.Unmarshal(body, &a); err != nil {
		return Answer{}, fmt.Errorf("%s answered 200 but not as the model server does: %w: %.200s", url, err, body)
	}
	if a.Server == "" {
		return Answer{}, fmt.Errorf("%s answered 200 but not as the model server does (no server named): %.200s", url, body)
	}
	return a, nil
}
