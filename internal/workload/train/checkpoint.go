package train

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// checkpointVersion is bumped when State changes incompatibly, so an old binary never resumes from
// a checkpoint it would misread.
const checkpointVersion = 1

// CheckpointVersion is the State.Version this binary writes and resumes; a caller that builds a
// State itself (the gang workload) must set it.
const CheckpointVersion = checkpointVersion

// DefaultKeep is how many checkpoints survive pruning: the newest plus two to fall back to if the
// newest turns out to be damaged.
const DefaultKeep = 3

// State is the training state a checkpoint preserves.
type State struct {
	// Version is checkpointVersion at write time.
	Version int `json:"version"`
	// WorkID identifies the job; a checkpoint for another work is never resumed.
	WorkID string `json:"work_id"`
	// Step is the last completed step; 0 means no step completed yet.
	Step int `json:"step"`
	// Restarts counts how many attempts resumed from a checkpoint, so the suite can tell a job that
	// resumed after preemption from one that silently started over (Restarts 0 with Step reset).
	Restarts int `json:"restarts"`
	// FirstStart is when the very first attempt began; it is carried forward unchanged.
	FirstStart time.Time `json:"first_start"`
	// WrittenAt is when this checkpoint was written.
	WrittenAt time.Time `json:"written_at"`
	// Reason is why this checkpoint was written: "interval", "sigterm" or "final". A resumed attempt
	// reports it, so the suite can tell a job that saved its last step on SIGTERM from one that was
	// killed before it could (a grace period shorter than the checkpoint write).
	Reason string `json:"reason,omitempty"`
	// Digest is the simulated model: a hash chained over every completed step. A resumed run ends with
	// the same digest as an uninterrupted one, so the suite can check recovery lost no state.
	Digest string `json:"digest"`
}

// checkpointFile is the on-disk envelope. The checksum covers the payload's exact bytes, which is
// why Payload stays raw: re-encoding it could change the bytes and hide or fake a mismatch.
type checkpointFile struct {
	Payload  json.RawMessage `json:"payload"`
	Checksum string          `json:"checksum"`
}

// checkpointName matches finished checkpoints only; temporary and quarantined files never match.
var checkpointName = regexp.MustCompile(`^ckpt-([0-9]+)\.json$`)

const (
	tempPattern      = ".ckpt-*.tmp"
	quarantineSuffix = ".corrupt"
)

// FileName returns the checkpoint file name for step. Zero-padding keeps lexical and numeric order
// the same, which makes a directory listing readable during debugging.
func FileName(step int) string { return fmt.Sprintf("ckpt-%012d.json", step) }

func checksum(payload []byte) string {
	sum := sha256.Sum256(payload)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// syncFile is the part of *os.File that Save needs; tests substitute a failing one.
type syncFile interface {
	io.Writer
	Sync() error
	Close() error
	Name() string
}

// Store reads and writes the checkpoints of one work in one directory.
type Store struct {
	// Dir holds the checkpoints; it is created if missing.
	Dir string
	// Keep is how many checkpoints to retain; zero means DefaultKeep.
	Keep int

	// createTemp and beforeRename are test seams for proving Save's atomicity.
	createTemp   func(dir, pattern string) (syncFile, error)
	beforeRename func(tmpPath, finalPath string)
}

// Skipped describes a checkpoint that Load refused to trust.
type Skipped struct {
	File   string `json:"file"`
	Reason string `json:"reason"`
}

// Save writes st as the checkpoint for st.Step atomically and prunes old checkpoints. A reader sees
// either the previous set of files or the new complete file, never a partial one: the data goes to a
// temporary name, is fsynced, renamed over the final name, and the directory is fsynced so the rename
// itself survives a node crash.
func (s *Store) Save(st State) (string, error) {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return "", fmt.Errorf("creating checkpoint dir: %w", err)
	}
	payload, err := json.Marshal(st)
	if err != nil {
		return "", fmt.Errorf("encoding checkpoint: %w", err)
	}
	data, err := json.Marshal(checkpointFile{Payload: payload, Checksum: checksum(payload)})
	if err != nil {
		return "", fmt.Errorf("encoding checkpoint: %w", err)
	}
	data = append(data, '\n')

	create := s.createTemp
	if create == nil {
		create = func(dir, pattern string) (syncFile, error) { return os.CreateTemp(dir, pattern) }
	}
	tmp, err := create(s.Dir, tempPattern)
	if err != nil {
		return "", fmt.Errorf("creating temporary checkpoint: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return "", fmt.Errorf("writing checkpoint: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("syncing checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("closing checkpoint: %w", err)
	}
	final := filepath.Join(s.Dir, FileName(st.Step))
	if s.beforeRename != nil {
		s.beforeRename(tmp.Name(), final)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("publishing checkpoint: %w", err)
	}
	committed = true
	if err := syncDir(s.Dir); err != nil {
		return "", err
	}
	if err := s.prune(); err != nil {
		return final, err
	}
	return final, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening checkpoint dir for sync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing checkpoint dir: %w", err)
	}
	return nil
}

// checkpointEntry is a finished checkpoint file found in the directory.
type checkpointEntry struct {
	step int
	path string
}

// list returns the finished checkpoints, newest first.
func (s *Store) list() ([]checkpointEntry, error) {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing checkpoints: %w", err)
	}
	var found []checkpointEntry
	for _, e := range entries {
		m := checkpointName.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		step, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		found = append(found, checkpointEntry{step, filepath.Join(s.Dir, e.Name())})
	}
	slices.SortFunc(found, func(a, b checkpointEntry) int { return cmp.Compare(b.step, a.step) }) // newest first
	return found, nil
}

// prune removes all but the newest Keep checkpoints.
func (s *Store) prune() error {
	keep := s.Keep
	if keep <= 0 {
		keep = DefaultKeep
	}
	found, err := s.list()
	if err != nil {
		return err
	}
	for i := keep; i < len(found); i++ {
		if err := os.Remove(found[i].path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pruning checkpoint: %w", err)
		}
	}
	return nil
}

// Load returns the newest checkpoint of workID that passes every check, or nil when there is none.
// Damaged files (unparseable, torn, checksum mismatch, inconsistent) are renamed aside with a
// ".corrupt" suffix so they stop occupying one of the Keep slots and remain for a post-mortem;
// checkpoints of another work are skipped but left alone. Leftover temporary files from a write that
// was cut short are removed. Every file not trusted is reported in skipped.
func (s *Store) Load(workID string) (st *State, path string, skipped []Skipped, err error) {
	s.removeStaleTemps()
	found, err := s.list()
	if err != nil {
		return nil, "", nil, err
	}
	for _, c := range found {
		candidate, reason, corrupt := readCheckpoint(c, workID)
		if reason == "" {
			return candidate, c.path, skipped, nil
		}
		skipped = append(skipped, Skipped{File: c.path, Reason: reason})
		if corrupt {
			// Best effort: if the rename fails the file is still skipped on every load.
			_ = os.Rename(c.path, c.path+quarantineSuffix)
		}
	}
	return nil, "", skipped, nil
}

// readCheckpoint validates one file. A non-empty reason means it must not be trusted; corrupt says
// whether the file itself is damaged rather than merely belonging to another work.
func readCheckpoint(c checkpointEntry, workID string) (st *State, reason string, corrupt bool) {
	data, err := os.ReadFile(c.path)
	if err != nil {
		return nil, fmt.Sprintf("unreadable: %v", err), false
	}
	var env checkpointFile
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Sprintf("unparseable (torn or corrupt write?): %v", err), true
	}
	if len(env.Payload) == 0 || env.Checksum == "" {
		return nil, "missing payload or checksum", true
	}
	if got := checksum(env.Payload); got != env.Checksum {
		return nil, fmt.Sprintf("checksum mismatch: file says %s, payload hashes to %s", env.Checksum, got), true
	}
	var state State
	if err := json.Unmarshal(env.Payload, &state); err != nil {
		return nil, fmt.Sprintf("payload unparseable: %v", err), true
	}
	switch {
	case state.Version != checkpointVersion:
		return nil, fmt.Sprintf("version %d, this binary reads %d", state.Version, checkpointVersion), false
	case state.Step != c.step:
		return nil, fmt.Sprintf("file name says step %d, payload says %d", c.step, state.Step), true
	case state.Step < 0 || state.Restarts < 0:
		return nil, fmt.Sprintf("negative step %d or restarts %d", state.Step, state.Restarts), true
	case state.WorkID != workID:
		return nil, fmt.Sprintf("belongs to work %q, not %q", state.WorkID, workID), false
	}
	return &state, "", false
}

// removeStaleTemps deletes temporary files left by a write that never reached its rename. Only one
// trainer owns the directory, so at load time no write can be in flight.
func (s *Store) removeStaleTemps() {
	matches, _ := filepath.Glob(filepath.Join(s.Dir, tempPattern))
	for _, m := range matches {
		if strings.HasSuffix(m, ".tmp") {
			_ = os.Remove(m)
		}
	}
}

// Checkpoints returns every checkpoint of workID that passes the checks Load makes, newest first.
// It treats the files Load would not trust the same way: damaged ones are moved aside, another
// work's are left alone, and each is reported in skipped. A gang worker uses it to tell its peers
// which steps it could resume from.
func (s *Store) Checkpoints(workID string) (states []State, skipped []Skipped, err error) {
	s.removeStaleTemps()
	found, err := s.list()
	if err != nil {
		return nil, nil, err
	}
	for _, c := range found {
		st, reason, corrupt := readCheckpoint(c, workID)
		if reason == "" {
			states = append(states, *st)
			continue
		}
		skipped = append(skipped, Skipped{File: c.path, Reason: reason})
		if corrupt {
			_ = os.Rename(c.path, c.path+quarantineSuffix)
		}
	}
	return states, skipped, nil
}

// LoadStep returns the checkpoint of workID for exactly step, and its path. Unlike Load it does not
// fall back to an older checkpoint: a missing or untrustworthy file is an error.
func (s *Store) LoadStep(workID string, step int) (*State, string, error) {
	path := filepath.Join(s.Dir, FileName(step))
	st, reason, _ := readCheckpoint(checkpointEntry{step: step, path: path}, workID)
	if reason != "" {
		return nil, path, fmt.Errorf("checkpoint for step %d: %s", step, reason)
	}
	return st, path, nil
}

// RemoveAfter deletes the finished checkpoints newer than step and returns their paths. A gang that
// resumes from an older common step uses it: the newer files describe a future the gang abandoned,
// and left in place they would crowd the step every worker shares out of the Keep newest.
func (s *Store) RemoveAfter(step int) ([]string, error) {
	found, err := s.list()
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, c := range found {
		if c.step <= step {
			continue
		}
		if err := os.Remove(c.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("removing checkpoint: %w", err)
		}
		removed = append(removed, c.path)
	}
	return removed, nil
}
