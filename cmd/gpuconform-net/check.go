package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// serviceAccountDir is where a pod's API credentials are mounted.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount/"

// checkCommand runs the network self-test's two sides: `check serve` answers HTTP with its hostname, and
// `check get URL...` fetches each URL (retrying while DNS and routes settle) and fails on the first that
// does not answer. HTTPS requests are verified against the pod's service-account CA and carry its token,
// so `https://kubernetes.default.svc/...` is a real, authenticated API call.
func checkCommand(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: gpuconform-net check serve --port N | get [--retry-for D] URL...")
		return 2
	}
	switch args[0] {
	case "serve":
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		port := fs.Int("port", 8080, "port to listen on")
		if fs.Parse(args[1:]) != nil {
			return 2
		}
		host, _ := os.Hostname()
		http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "hello from %s\n", host) })
		fmt.Fprintln(os.Stderr, http.ListenAndServe(fmt.Sprintf(":%d", *port), nil))
		return 1
	case "get":
		fs := flag.NewFlagSet("get", flag.ContinueOnError)
		retry := fs.Duration("retry-for", 60*time.Second, "how long to retry each URL")
		if fs.Parse(args[1:]) != nil || fs.NArg() == 0 {
			return 2
		}
		for _, u := range fs.Args() {
			body, err := getWithRetry(u, *retry)
			if err != nil {
				fmt.Printf("FAIL %s: %v\n", u, err)
				return 1
			}
			fmt.Printf("OK %s: %s\n", u, strings.Join(strings.Fields(body), " "))
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown check %q\n", args[0])
	return 2
}

// getWithRetry fetches url every two seconds until it answers or within has passed, and returns the
// last attempt's result.
func getWithRetry(url string, within time.Duration) (string, error) {
	var body string
	var err error
	_ = wait.PollUntilContextTimeout(context.Background(), 2*time.Second, within, true, func(context.Context) (bool, error) {
		body, err = get(url)
		return err == nil, nil
	})
	return body, err
}

func get(url string) (string, error) {
	tr := &http.Transport{TLSClientConfig: &tls.Config{}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(url, "https://") {
		if ca, err := os.ReadFile(serviceAccountDir + "ca.crt"); err == nil {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(ca)
			tr.TLSClientConfig.RootCAs = pool
		}
		if tok, err := os.ReadFile(serviceAccountDir + "token"); err == nil {
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
		}
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode >= 400 {
		return string(b), fmt.Errorf("status %s", resp.Status)
	}
	return string(b), nil
}
