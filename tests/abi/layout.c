/*
 * layout.c - prints the ABI facts that must never change: the size of each
 * public struct as of its first version is not fixed (they may grow at the
 * end), but the offset of every existing field is. tests/check_abi.sh
 * compares the output with tests/abi/baseline.txt.
 */
#include <stddef.h>
#include <stdio.h>

#include "qwinfer.h"

#define OFF(type, field) printf("offset %s.%s %zu\n", #type, #field, offsetof(type, field))

int main(void) {
    OFF(qw_event, kind);
    OFF(qw_event, finish_reason);
    OFF(qw_event, token);
    OFF(qw_event, index);
    OFF(qw_event, request_id);
    OFF(qw_event, request);
    OFF(qw_event, user_data);
    OFF(qw_request_stats, size);
    OFF(qw_request_stats, arrival_time);
    OFF(qw_request_stats, queue_time);
    OFF(qw_request_stats, time_to_first_token);
    OFF(qw_request_stats, decode_time);
    OFF(qw_request_stats, prompt_tokens);
    OFF(qw_request_stats, cached_prompt_tokens);
    OFF(qw_request_stats, num_preemptions);
    OFF(qw_request_stats, generated_tokens);
    OFF(qw_request_stats, computed_tokens);
    OFF(qw_engine_stats, size);
    OFF(qw_engine_stats, num_running);
    OFF(qw_engine_stats, num_waiting);
    OFF(qw_engine_stats, num_preempted_waiting);
    OFF(qw_engine_stats, kv_blocks_total);
    OFF(qw_engine_stats, kv_blocks_used);
    OFF(qw_engine_stats, kv_blocks_cached_free);
    OFF(qw_engine_stats, prefix_cache_queries);
    OFF(qw_engine_stats, prefix_cache_hits);
    OFF(qw_engine_stats, prompt_tokens);
    OFF(qw_engine_stats, generation_tokens);
    OFF(qw_engine_stats, num_steps);
    OFF(qw_engine_stats, last_batch_size);
    OFF(qw_engine_stats, mean_batch_size);
    OFF(qw_engine_stats, num_preemptions);
    OFF(qw_engine_stats, forward_seconds);
    OFF(qw_engine_stats, host_seconds);
    OFF(qw_engine_stats, num_finished);
    return 0;
}
