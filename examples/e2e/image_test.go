package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// pauseImage is the sandbox image: containerd's CRI plugin runs it as
// every pod's sandbox container, and finds it in its image store rather
// than pulling it.
const pauseImage = "localhost/" + prefix + "/pause:1"

// pauseSource is the sandbox container's program: it holds the pod's
// namespaces and sleeps until it is signalled, as the pause image does.
const pauseSource = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
`

// importImage builds the pause program, writes it as a docker-archive
// tarball (docker save's format: manifest.json, the image config, one
// layer) and imports it into containerd's k8s.io namespace, where the CRI
// plugin keeps its images.
func (n *node) importImage(ctx context.Context) error {
	src := filepath.Join(n.dir, "image", "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(pauseSource), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module pause\n\ngo 1.21\n"), 0o644); err != nil {
		return err
	}
	bin := filepath.Join(n.dir, "image", "pause")
	if err := goTool(ctx, src, []string{"GOWORK=off"}, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "."); err != nil {
		return err
	}
	tarball := filepath.Join(n.dir, "image", "pause.tar")
	if err := writeImage(tarball, bin); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "ctr", "--address", n.sock, "--namespace", "k8s.io", "images", "import", "--snapshotter", "overlayfs", tarball)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import: %v\n%s", err, out)
	}
	return nil
}

// writeImage writes the docker-archive tarball of an image whose one
// layer holds bin as /pause, its entrypoint.
func writeImage(path, bin string) error {
	program, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	layer, err := tarOf(map[string][]byte{"pause": program}, 0o755)
	if err != nil {
		return err
	}
	diffID := sha256.Sum256(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   "config.json",
		"RepoTags": []string{pauseImage},
		"Layers":   []string{"layer.tar"},
	}})
	if err != nil {
		return err
	}
	archive, err := tarOf(map[string][]byte{"manifest.json": manifest, "config.json": config, "layer.tar": layer}, 0o644)
	if err != nil {
		return err
	}
	return os.WriteFile(path, archive, 0o644)
}

// tarOf is a tar archive of files, each with mode, in a fixed order.
func tarOf(files map[string][]byte, mode int64) ([]byte, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, name := range sortedKeys(files) {
		data := files[name]
		if err := w.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := w.Write(data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
