/* pstat: the best metadata rate a client gets at a given concurrency.
 *
 * N pthreads lstat() a list of paths, each taking the next path from a shared atomic index,
 * so exactly N operations are in flight until the list runs out.  No Python, no pools, no
 * scheduling: what it measures is the storage (and the kernel client), the ceiling that pfs
 * scans are compared with.
 *
 *   pstat -t THREADS [-d DIR] [-r REPEAT] [-R] [-a] < paths     paths one per line (find DIR -type f)
 *   -d DIR   take the entries of DIR (one readdir, not recursive) instead of stdin
 *   -r N     stat the list N times (default 1)
 *   -R       read each file instead: open, read(2) to the end in 1 MiB calls, close.  The ceiling of
 *            the actions that move data (cp, verify), as lstat is of the metadata ones.
 *   -a       relative to the directory: open every parent directory first (untimed, like taking the
 *            path list), then fstatat / openat the bare names, as find and pfs do.  A full path costs
 *            one lookup per component, a round trip each on a network mount once its entry expired.
 *
 * Prints: threads, ops, errors, seconds, ops/s, bytes (read mode), mean/p50/p99 latency in microseconds.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char **paths;
static size_t npaths, total;
static atomic_size_t next_op;
static atomic_size_t errors;
static atomic_int first_errno; /* the first failure's errno, reported so a vanished mount shows */
static double *lat_us; /* one slot per operation */
static int read_mode;
static int at_mode;
static int *dir_fd_of; /* -a: per path, its open parent directory */
static const char **base_of; /* -a: per path, the name within it */
static atomic_size_t bytes_read;
#define READ_BLOCK (1 << 20)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One file read to its end; 0 or -1 with errno set, like lstat. */
static int read_file(int dir_fd, const char *path, char *buf) {
    int fd = openat(dir_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n;
    size_t got = 0;
    while ((n = read(fd, buf, READ_BLOCK)) > 0) got += (size_t)n;
    int saved = errno;
    close(fd);
    atomic_fetch_add(&bytes_read, got);
    if (n < 0) { errno = saved; return -1; }
    return 0;
}

static void *worker(void *arg) {
    (void)arg;
    struct stat st;
    char *buf = read_mode ? malloc(READ_BLOCK) : NULL;
    if (read_mode && !buf) { perror("malloc"); exit(1); }
    for (;;) {
        size_t i = atomic_fetch_add(&next_op, 1);
        if (i >= total) { free(buf); return NULL; }
        size_t k = i % npaths;
        int dir_fd = at_mode ? dir_fd_of[k] : AT_FDCWD;
        const char *name = at_mode ? base_of[k] : paths[k];
        double t = now();
        if ((read_mode ? read_file(dir_fd, name, buf) : fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW)) != 0) {
            int zero = 0;
            atomic_fetch_add(&errors, 1);
            atomic_compare_exchange_strong(&first_errno, &zero, errno);
        }
        lat_us[i] = (now() - t) * 1e6;
    }
}

static void add(char *p) {
    static size_t cap;
    if (npaths == cap) {
        cap = cap ? cap * 2 : 4096;
        paths = realloc(paths, cap * sizeof *paths);
        if (!paths) { perror("realloc"); exit(1); }
    }
    paths[npaths++] = p;
}

/* -a: open each path's parent once (consecutive paths share it, as find lists them). */
static double open_parents(void) {
    double t = now();
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    dir_fd_of = calloc(npaths, sizeof *dir_fd_of);
    base_of = calloc(npaths, sizeof *base_of);
    char *last_dir = NULL;
    int last_fd = -1;
    for (size_t k = 0; k < npaths; k++) {
        char *slash = strrchr(paths[k], '/');
        char *dir = slash ? strndup(paths[k], slash == paths[k] ? 1 : (size_t)(slash - paths[k])) : strdup(".");
        if (!last_dir || strcmp(dir, last_dir)) {
            free(last_dir);
            last_dir = dir;
            last_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (last_fd < 0) { perror(dir); exit(1); }
        } else {
            free(dir);
        }
        dir_fd_of[k] = last_fd;
        base_of[k] = slash ? slash + 1 : paths[k];
    }
    free(last_dir);
    return now() - t;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int threads = 1, repeat = 1, c;
    const char *dir = NULL;
    while ((c = getopt(argc, argv, "t:d:r:Ra")) != -1) {
        if (c == 't') threads = atoi(optarg);
        else if (c == 'd') dir = optarg;
        else if (c == 'r') repeat = atoi(optarg);
        else if (c == 'R') read_mode = 1;
        else if (c == 'a') at_mode = 1;
        else { fprintf(stderr, "usage: pstat -t THREADS [-d DIR] [-r REPEAT] [-R] [-a] < paths\n"); return 2; }
    }
    if (threads < 1 || repeat < 1) { fprintf(stderr, "pstat: -t and -r must be >= 1\n"); return 2; }
    if (dir) {
        DIR *d = opendir(dir);
        if (!d) { perror(dir); return 1; }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *p;
            if (asprintf(&p, "%s/%s", dir, e->d_name) < 0) return 1;
            add(p);
        }
        closedir(d);
    } else {
        char *line = NULL;
        size_t n = 0;
        ssize_t len;
        while ((len = getline(&line, &n, stdin)) > 0) {
            if (line[len - 1] == '\n') line[--len] = 0;
            if (len) add(strdup(line));
        }
        free(line);
    }
    if (!npaths) { fprintf(stderr, "pstat: no paths\n"); return 1; }
    double open_secs = at_mode ? open_parents() : 0;
    total = npaths * (size_t)repeat;
    lat_us = calloc(total, sizeof *lat_us);
    pthread_t *tid = calloc(threads, sizeof *tid);
    double t0 = now();
    for (int i = 0; i < threads; i++) pthread_create(&tid[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++) pthread_join(tid[i], NULL);
    double secs = now() - t0, sum = 0;
    for (size_t i = 0; i < total; i++) sum += lat_us[i];
    qsort(lat_us, total, sizeof *lat_us, cmp);
    printf("threads=%d ops=%zu errors=%zu seconds=%.3f ops_per_s=%.0f bytes=%zu lat_mean_us=%.0f lat_p50_us=%.0f "
           "lat_p99_us=%.0f dir_open_seconds=%.3f\n",
           threads, total, (size_t)atomic_load(&errors), secs, total / secs, (size_t)atomic_load(&bytes_read), sum / total,
           lat_us[total / 2], lat_us[(size_t)(total * 0.99)], open_secs);
    if (atomic_load(&errors)) fprintf(stderr, "pstat: first error: %s\n", strerror(atomic_load(&first_errno)));
    return 0;
}
