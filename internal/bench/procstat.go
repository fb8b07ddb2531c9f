package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is the unit of /proc/<pid>/stat's utime and stime: USER_HZ, 100 on every
// Linux the bench runs on.
const clockTicks = 100

// procStat returns a process's parent and its CPU time (user + system) so far, in
// seconds, from /proc/<pid>/stat; ok is false where there is no such file.
func procStat(pid int) (ppid int, cpuSeconds float64, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name, field 2, is in parentheses and may hold spaces: count from its end.
	s := string(data)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[end+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return ppid, float64(utime+stime) / clockTicks, true
}

// postmasterOf returns the PostgreSQL postmaster whose child backend is (a server
// process of one of the bench's sessions), or ok false when backend is not a local
// process named postgres: the server is elsewhere.
func postmasterOf(backend int) (pid int, ok bool) {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(backend) + "/comm")
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(comm)), "postgres") {
		return 0, false
	}
	pid, _, ok = procStat(backend)
	return pid, ok
}

// serverCPU sums the CPU time of a local PostgreSQL server: its postmaster and every
// child of it. Processes that exited since an earlier reading take their time with them,
// so a window's delta leaves out sessions that ended inside it.
func serverCPU(postmaster int) (seconds float64) {
	entries, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range entries {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		ppid, cpu, ok := procStat(pid)
		if ok && (pid == postmaster || ppid == postmaster) {
			seconds += cpu
		}
	}
	return seconds
}
