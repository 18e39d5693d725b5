/* The unit test suites, one per module of common/ and of the worker. */
#ifndef EMBER_SUITES_H
#define EMBER_SUITES_H

#include <check.h>

Suite	*held_suite(void);
Suite	*conf_suite(void);
Suite	*frame_suite(void);
Suite	*jread_suite(void);
Suite	*log_suite(void);
Suite	*ops_suite(void);
Suite	*plan_suite(void);
Suite	*plugin_suite(void);
Suite	*split_suite(void);
Suite	*wmsg_suite(void);

#endif
