package reports

import (
	"context"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// headlessBrowser returns a Chromium-family browser on PATH, or "".
func headlessBrowser() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestHTMLRendersInAHeadlessBrowser opens the signoff page in a real browser (Debian's chromium, which
// `make test` installs from the package mirror) and checks the pixels: the NO-GO badge and the Gantt
// chart's working and evicted bars must be drawn, which only happens when the browser parsed the page,
// its CSS and its inline SVG.
func TestHTMLRendersInAHeadlessBrowser(t *testing.T) {
	browser := headlessBrowser()
	if browser == "" {
		t.Skip("no headless browser on PATH (chromium); `make test` installs Debian's chromium, without it this check does not run")
	}
	suites, rec := preemptedRun()
	dir := t.TempDir()
	page := filepath.Join(dir, HTMLFile)
	if err := os.WriteFile(page, []byte(RenderHTML(suites, rec)), 0o644); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "signoff.png")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
	out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--window-size=1200,2400", "--screenshot="+shot, "file://"+page).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, out)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]color.RGBA{
		"NO-GO badge":         {0xc0, 0x39, 0x2b, 0xff},
		"working bar (Gantt)": {0x3a, 0xa6, 0x55, 0xff},
		"evicted bar (Gantt)": {0x9b, 0x59, 0xb6, 0xff},
	}
	found := map[string]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			for name, c := range want {
				if uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(bl>>8) == c.B {
					found[name] = true
				}
			}
		}
	}
	for name := range want {
		if !found[name] {
			t.Errorf("the browser did not draw the %s (screenshot %s)", name, shot)
		}
	}
}
