package ops_test

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kumiko-go/kumiko/internal/ops"
)

// On a terminal the default logger writes text for a person (key=value),
// not JSON; /dev/null, a character device but no terminal, gets JSON.
func TestDefaultLoggerTextOnATerminal(t *testing.T) {
	t.Parallel()
	ptm, pts := openPTY(t)
	ops.DefaultLogger(pts).Info("hello", "k", 1)
	line, err := bufio.NewReader(ptm).ReadString('\n')
	require.NoError(t, err)
	line = strings.TrimSpace(line)
	require.Contains(t, line, "level=INFO")
	require.Contains(t, line, "msg=hello")
	require.Contains(t, line, "k=1")
	require.False(t, json.Valid([]byte(line)), "a terminal gets text, not JSON: %s", line)

	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = null.Close() })
	require.IsType(t, &slog.JSONHandler{}, ops.DefaultLogger(null).Handler())
}

// openPTY opens a pseudo-terminal pair: what is written to pts is read from
// ptm.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ptm.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0)) // unlock
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pts.Close() })
	return ptm, pts
}
