/* test_notify.c: systemd's notify protocol (server/http/notify.c): the datagram reaches a
 * path or an abstract socket, nothing is sent without NOTIFY_SOCKET, the watchdog's
 * environment is read the way sd_watchdog_enabled(3) does, and a stuck scheduler
 * (a stale heartbeat) gets no WATCHDOG=1.
 *
 * notify.c is included so its static message composition can be tested directly; the
 * running server's messages are checked by tests/integration/test_systemd.py.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/http/notify.c"

/* A bound datagram socket standing in for systemd; its address goes to NOTIFY_SOCKET. */
static int listen_at(const char *address) {
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(address);
    memcpy(addr.sun_path, address, len);
    if (address[0] == '@') addr.sun_path[0] = '\0';
    if (address[0] == '/') unlink(address);
    cr_assert_eq(bind(fd, (struct sockaddr *)&addr, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)), 0);
    setenv("NOTIFY_SOCKET", address, 1);
    return fd;
}

static void receive(int fd, char *buf, size_t cap) {
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t n = recv(fd, buf, cap - 1, 0);
    cr_assert_gt(n, 0, "no datagram");
    buf[n] = '\0';
}

Test(srv_notify, sends_to_a_path) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/spindle-test-notify-%d", (int)getpid());
    int fd = listen_at(path);
    cr_assert_eq(srv_notify_send("READY=1\nSTATUS=hello"), SP_OK);
    char buf[256];
    receive(fd, buf, sizeof buf);
    cr_assert_str_eq(buf, "READY=1\nSTATUS=hello");
    close(fd);
    unlink(path);
}

Test(srv_notify, sends_to_an_abstract_name) {
    char name[64];
    snprintf(name, sizeof name, "@spindle-test-notify-%d", (int)getpid());
    int fd = listen_at(name);
    srv_notify_status("serving %s:\n%d running", "m", 3); /* a newline would start another key */
    char buf[256];
    receive(fd, buf, sizeof buf);
    cr_assert_str_eq(buf, "STATUS=serving m: 3 running");
    close(fd);
}

Test(srv_notify, is_a_no_op_without_notify_socket) {
    unsetenv("NOTIFY_SOCKET");
    cr_assert_eq(srv_notify_send("READY=1"), SP_OK);
    srv_notify *n = (srv_notify *)1;
    cr_assert_eq(srv_notify_start(NULL, &n), SP_OK);
    cr_assert_null(n);
}

Test(srv_notify, names_a_socket_it_cannot_reach) {
    setenv("NOTIFY_SOCKET", "/nonexistent/notify", 1);
    cr_assert_eq(srv_notify_send("READY=1"), SP_ERR_IO);
    cr_assert(strstr(sp_last_error(), "/nonexistent/notify"), "%s", sp_last_error());
    setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
    cr_assert_eq(srv_notify_send("READY=1"), SP_ERR_UNSUPPORTED);
}

Test(srv_notify, reads_the_watchdog_environment) {
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    unsetenv("WATCHDOG_PID");
    unsetenv("WATCHDOG_USEC");
    cr_assert_eq(notify_watchdog_s(), 0);
    setenv("WATCHDOG_USEC", "30000000", 1);
    cr_assert_float_eq(notify_watchdog_s(), 30.0, 1e-9);
    setenv("WATCHDOG_PID", pid, 1);
    cr_assert_float_eq(notify_watchdog_s(), 30.0, 1e-9);
    setenv("WATCHDOG_PID", "1", 1); /* meant for another process */
    cr_assert_eq(notify_watchdog_s(), 0);
    unsetenv("WATCHDOG_PID");
    setenv("WATCHDOG_USEC", "30s", 1);
    cr_assert_eq(notify_watchdog_s(), 0);
    unsetenv("WATCHDOG_USEC");
}

Test(srv_notify, pets_the_watchdog_while_the_heartbeat_is_fresh) {
    notify_snapshot s = {.phase = SRV_PHASE_READY, .has_sched = true, .heartbeat_age_s = 0.05, .running = 3};
    char buf[256];
    notify_compose(buf, sizeof buf, "SmolLM2", &s, true);
    cr_assert_str_eq(buf, "WATCHDOG=1\nSTATUS=serving SmolLM2: 3 running, 0 waiting");
    notify_compose(buf, sizeof buf, "SmolLM2", &s, false); /* no watchdog asked for */
    cr_assert_str_eq(buf, "STATUS=serving SmolLM2: 3 running, 0 waiting");
    s.phase = SRV_PHASE_DRAINING;
    s.waiting = 2;
    notify_compose(buf, sizeof buf, "SmolLM2", &s, true);
    cr_assert_str_eq(buf, "WATCHDOG=1\nSTATUS=draining SmolLM2: 3 running, 2 waiting");
}

Test(srv_notify, a_stuck_scheduler_stops_petting) {
    notify_snapshot s = {.phase = SRV_PHASE_READY, .has_sched = true, .heartbeat_age_s = SRV_HEARTBEAT_STALE_S + 1};
    char buf[256];
    notify_compose(buf, sizeof buf, "SmolLM2", &s, true);
    cr_assert_null(strstr(buf, "WATCHDOG"), "%s", buf);
    cr_assert_str_eq(buf, "STATUS=stuck: the scheduler has not ticked for 31 s (SmolLM2: 0 running, 0 waiting)");
    notify_snapshot gone = {.phase = SRV_PHASE_SHUTTING_DOWN}; /* no scheduler to vouch for */
    notify_compose(buf, sizeof buf, "SmolLM2", &gone, true);
    cr_assert_str_eq(buf, "STATUS=shutting down SmolLM2");
}
