/*
 * The unit test suites, one per module: of common/ and of the worker in
 * check_common, of daemon/ in check_daemon.
 */
#ifndef EMBER_SUITES_H
#define EMBER_SUITES_H

#include <check.h>

Suite	*bindex_suite(void);
Suite	*cgroup_suite(void);
Suite	*channel_suite(void);
Suite	*ckpt_suite(void);
Suite	*conf_suite(void);
Suite	*frame_suite(void);
Suite	*held_suite(void);
Suite	*helper_suite(void);
Suite	*joblog_suite(void);
Suite	*jread_suite(void);
Suite	*jwrite_suite(void);
Suite	*keyed_suite(void);
Suite	*log_suite(void);
Suite	*ops_suite(void);
Suite	*parser_suite(void);
Suite	*plan_suite(void);
Suite	*plugin_suite(void);
Suite	*request_suite(void);
Suite	*result_suite(void);
Suite	*retry_suite(void);
Suite	*ring_suite(void);
Suite	*savecommit_suite(void);
Suite	*shuffle_suite(void);
Suite	*split_suite(void);
Suite	*status_view_suite(void);
Suite	*task_suite(void);
Suite	*wmsg_suite(void);
Suite	*wshuffle_suite(void);

#endif
