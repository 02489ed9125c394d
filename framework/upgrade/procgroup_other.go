//go:build !unix

package upgrade

import "os/exec"

// killGroup leaves cancellation to exec's default, killing the script only: no process groups here.
func killGroup(*exec.Cmd) {}
