/* test_hash.c - common/hash.c: hash_bytes spreads keys that differ in one
 * byte over a table's slots; hash_process_seed is stable within a process
 * and differs between processes, so colliding keys cannot be worked out
 * ahead for a table keyed by outside input. */
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../common/hash.h"
#include "unit.h"

/* The seed a new process draws (a child's), or 0 when none could be read. */
static uint64_t
child_seed(void)
{
	int fd[2];
	uint64_t seed = 0;
	pid_t pid;

	if (pipe(fd) < 0 || (pid = fork()) < 0)
		return 0;
	if (pid == 0) {
		uint64_t s = hash_process_seed();

		close(fd[0]);
		_exit(write(fd[1], &s, sizeof(s)) == (ssize_t)sizeof(s) ? 0 : 1);
	}
	close(fd[1]);
	if (read(fd[0], &seed, sizeof(seed)) != (ssize_t)sizeof(seed))
		seed = 0;
	close(fd[0]);
	waitpid(pid, NULL, 0);
	return seed;
}

int
main(void)
{
	/* the children first: a fork after the parent drew would copy its seed */
	uint64_t b = child_seed(), c = child_seed(), a = hash_process_seed();
	int used[1024] = { 0 }, filled = 0;
	char key[16];

	CHECK(hash_process_seed() == a, "the seed changed within the process");
	CHECK(b != 0 && c != 0 && a != b && b != c,
	    "seeds of three processes: %llx %llx %llx", (unsigned long long)a,
	    (unsigned long long)b, (unsigned long long)c);
	/* 1,024 codes differing in their last characters over 1,024 slots:
	 * about 1 - 1/e of the slots get one, as with random slots */
	for (int i = 0; i < 1024; i++) {
		snprintf(key, sizeof(key), "aB3x%04d", i);
		used[hash_bytes(key, 8, a) & 1023] = 1;
	}
	for (int i = 0; i < 1024; i++)
		filled += used[i];
	CHECK(filled > 580 && filled < 720, "%d of 1024 slots used, want ~647", filled);
	CHECK(hash_bytes("abc", 3, 1) != hash_bytes("abc", 3, 2), "the seed changes nothing");
	return unit_done("test_hash");
}
