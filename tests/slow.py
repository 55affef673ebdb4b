"""The tests `make test-fast` leaves out besides the `starter` and `gemma` ones: each takes a second or
more on the 2-core build machine (its items together, measured with `pytest -n 2 --durations=0`):
subprocesses (the `chinwag` command, MCP servers, `mlx_lm.server`), whole window flows, every model
family's tiny fixture. tests/conftest.py marks them `slow`; `make test` runs them all. A test that
grows past a second joins this list ("*": the whole file); an entry whose file has no such test any
more fails the run.
"""

SLOW = {
    "tests/app/chat/test_front_ends.py": {"*"},  # MCP servers, the real window
    "tests/app/cli/test_chat_saved.py": {
        "test_a_terminal_chat_is_saved_and_listed",
        "test_continue_without_a_cut_reply_says_so_and_the_chat_goes_on",
        "test_continue_writes_on_after_a_reply_cut_at_max_tokens_and_saves_it_whole",
        "test_no_save_keeps_the_chat_out_of_the_store",
        "test_the_stderr_of_a_script_gets_no_progress_lines",
    },
    "tests/app/cli/test_fit_serve.py": {"*"},  # two `chinwag serve` runs answering the openai client
    "tests/app/cli/test_hostile.py": {
        "test_a_lock_held_by_another_program_is_not_a_window_brought_forward",
        "test_error_exits_after_mlx_never_abort",
    },
    "tests/app/cli/test_main.py": {
        "test_chat_reads_stdin_and_streams_replies",
        "test_subcommands_never_import_qt",
    },
    "tests/app/cli/test_servers_hostile.py": {
        "test_a_reply_a_server_stopped_sending_says_why_in_one_line_naming_the_figure",
        "test_a_server_answering_one_byte_at_a_time_holds_no_listing",
        "test_a_server_echoing_the_key_in_its_errors_never_shows_it",
        "test_a_url_with_a_secret_in_its_query_is_refused_before_anything_keeps_it",
    },
    "tests/app/core/test_store_long.py": {
        "test_a_chat_of_ten_thousand_messages_exports_imports_and_deletes",
    },
    "tests/app/documents/test_cli.py": {
        "test_chat_attach",
        "test_chat_attach_bad_input_is_one_line_and_exit_2",
        "test_replay_attachments_reuse_the_cache",
    },
    "tests/app/documents/test_extract.py": {
        "test_docx_member_list_is_checked_before_zipfile_reads_it",
        "test_docx_paragraph_bomb_is_refused_within_a_memory_bound",
        "test_docx_paragraph_styles_cost_little",
    },
    "tests/app/gui/chat/test_attachments.py": {
        "test_a_follow_ups_passages_are_read_ahead_too",
        "test_every_bad_input_is_one_line_on_the_chip_and_nothing_is_half_sent",
        "test_passages_used_are_shown_under_the_reply",
    },
    "tests/app/gui/chat/test_continue.py": {
        "test_continue_writes_on_in_the_same_message_as_one_longer_reply",
    },
    "tests/app/gui/chat/test_read_ahead.py": {
        "test_a_fork_whose_parent_has_no_cache_is_read_ahead_at_once",
        "test_a_model_switch_and_a_version_switch_read_the_chat_ahead",
        "test_on_the_real_engine_a_fork_and_new_instructions_cost_only_the_new_message",
        "test_on_the_real_engine_a_fork_of_a_chat_without_a_cache_is_read_before_enter",
    },
    "tests/app/gui/chat/test_versions.py": {
        "test_clicking_regenerate_leaves_the_keyboard_in_the_composer",
        "test_fork_from_the_message_menu",
        "test_switching_versions_reprefills_only_after_the_common_prefix",
        "test_versions_survive_a_restart",
    },
    "tests/app/gui/chat/test_view.py": {
        "test_a_version_switch_keeps_the_message_where_it_was",
    },
    "tests/app/gui/models/test_picker.py": {
        "test_a_server_that_refuses_the_key_is_not_usable_not_unreachable",
        "test_picker_download_entry_opens_the_download_dialog",
        "test_picker_is_busy_while_loading_and_lists_server_models",
        "test_picker_sits_in_the_chat_header",
    },
    "tests/app/gui/models/test_server_dialog.py": {
        "test_a_servers_reasoning_block_and_prefill_progress_show_in_the_window",
        "test_server_dialog_adds_edits_and_removes_servers",
        "test_server_dialog_says_where_the_key_went",
    },
    "tests/app/gui/settings/test_preferences.py": {
        "test_at_20_pt_the_settings_dialogs_fit_the_screen",
        "test_preferences_theme_font_and_default_model",
        "test_the_font_size_scales_every_text_in_the_chat",
    },
    "tests/app/gui/test_load_progress.py": {
        "test_window_keeps_handling_events_while_the_engine_imports_mlx",
    },
    "tests/app/gui/test_main.py": {
        "test_window_paints_before_mlx_lm_is_imported",
    },
    "tests/app/gui/test_screenshots.py": {
        "test_screenshots_are_written",
    },
    "tests/app/gui/test_server_panel.py": {
        "test_a_request_while_the_window_replies_waits_says_so_and_leaves_the_chat_intact",
        "test_preferences_open_the_server_dialog_and_show_its_state",
        "test_the_window_serves_its_engine",
    },
    "tests/app/gui/test_sidebar.py": {
        "test_a_snippet_starts_at_a_word_and_marks_the_match",
        "test_a_snippet_too_long_for_its_row_ends_after_a_whole_word",
        "test_a_title_with_its_match_in_bold_fits_its_row_whole_to_the_ellipsis",
        "test_esc_clears_the_search",
    },
    "tests/app/gui/test_window_delete.py": {
        "test_a_long_chat_deletes_and_is_forgotten",
    },
    "tests/app/gui/test_window_engine.py": {
        "test_main_flow_on_the_real_engine",
    },
    "tests/app/gui/test_window_fake.py": {
        "test_download_offline_and_show_folder",
        "test_message_sent_while_loading_is_queued_then_sent",
        "test_regenerate_and_edit",
        "test_rename_in_place",
        "test_reply_is_saved_while_it_grows",
        "test_send_streams_saves_and_shows_stats",
        "test_sidebar_order_rename_delete_undo_and_search",
        "test_streaming_rerenders_at_most_30_times_a_second",
    },
    "tests/app/gui/test_window_first_run.py": {
        "test_a_queued_message_is_not_left_waiting_when_no_model_loads",
        "test_at_a_bigger_font_size_a_line_of_the_reply_holds_as_many_words",
        "test_before_the_startup_load_begins_messages_still_queue",
        "test_code_copy_says_copied_then_resets",
        "test_ctrl_z_undoes_a_delete_but_not_inside_text",
        "test_custom_system_prompt_marker_in_the_header",
        "test_drafts_are_kept_per_chat_and_across_restarts",
        "test_empty_list_says_so_and_return_in_search_opens_the_first_result",
        "test_error_banner_clears_on_success_or_timeout",
        "test_reading_column_is_centred_and_reflows",
        "test_search_no_match_snippets_and_down_into_results",
        "test_welcome_says_loading_and_never_shows_the_raw_starter_id",
    },
    "tests/app/gui/test_window_flows.py": {
        "test_deleting_the_streaming_chat_stops_it",
        "test_download_can_be_cancelled",
        "test_import_gguf_and_add_folder_offer_to_load",
        "test_long_conversation_opens_the_latest_page",
        "test_search_shows_where_it_matched",
        "test_switching_chats_while_a_reply_streams",
    },
    "tests/app/gui/test_window_keys.py": {
        "test_ctrl_tab_and_ctrl_page_keys_move_between_chats",
        "test_up_in_an_empty_message_box_edits_the_last_message",
    },
    "tests/app/gui/test_window_newcomer.py": {
        "test_typing_straight_away_is_sent_and_answered",
    },
    "tests/app/gui/test_window_prefill.py": {
        "test_a_draft_typed_in_the_real_window_makes_enter_compute_one_token",
        "test_a_long_first_message_pasted_in_a_new_chat_costs_one_token_on_enter",
        "test_a_new_chats_draft_is_read_ahead_and_handed_to_the_chat_it_becomes",
        "test_no_draft_is_read_while_a_reply_generates_or_when_turned_off",
        "test_typing_pause_and_paste_read_the_draft_ahead",
    },
    "tests/app/gui/test_window_status.py": {
        "test_the_context_is_not_zero_while_a_draft_is_read",
    },
    "tests/app/gui/tools/test_tools_dialog.py": {
        "test_listing_one_tool_says_one_tool",
        "test_tools_dialog_adds_edits_enables_imports_and_sets_policies",
    },
    "tests/app/gui/tools/test_window_host.py": {
        "test_the_tools_dialog_restarts_the_servers_only_when_they_changed",
    },
    "tests/app/gui/tools/test_window_tools.py": {
        "test_a_draft_read_ahead_carries_the_tools_so_enter_computes_one_token",
        "test_a_model_without_tool_support_says_so_once_from_its_load",
        "test_always_allow_runs_the_call_and_the_reply_goes_on_and_reopening_shows_it",
        "test_closing_the_window_while_a_card_waits_keeps_the_history_whole",
        "test_deny_does_not_run_the_call",
        "test_policy_allow_runs_without_asking_and_stop_ends_a_hanging_call",
        "test_round_limit_ends_the_reply_with_a_line_and_a_chat_can_switch_its_servers_off",
        "test_stop_at_the_approval_card_runs_nothing",
    },
    "tests/app/server/test_connections.py": {
        "test_a_connection_that_sends_no_headers_in_time_is_closed",
    },
    "tests/app/server/test_errors.py": {
        "test_every_bad_request_gets_an_error_object",
    },
    "tests/app/server/test_lifecycle.py": {
        "test_chinwag_remote_backend_chats_through_the_server",
    },
    "tests/app/server/test_accept_errors.py": {"*"},  # a serve process flooded past its descriptors
    "tests/app/server/test_safety.py": {
        "test_a_post_whose_body_is_not_declared_json_gets_415",
    },
    "tests/app/server/test_serve_cli.py": {
        "test_a_signal_stops_the_server_and_saves_the_caches",
    },
    "tests/app/tools/test_cli_chat_tools.py": {
        "test_broken_mcp_json_is_one_line_and_status_2",
        "test_chat_on_a_model_without_tool_support_says_so_once",
        "test_chat_starts_enabled_servers_and_no_tools_turns_them_off",
        "test_names_from_a_server_are_shown_neutralised",
    },
    "tests/app/tools/test_mcp_client.py": {
        "test_a_result_is_checked_against_its_output_schema",
        "test_after_a_check_runs_out_of_time_the_next_is_checked_and_nothing_is_left_running",
        "test_an_output_schema_that_backtracks_cannot_freeze_the_loop_past_the_timeout",
        "test_crash_at_start_and_mid_call_is_reported_and_can_restart",
        "test_environment_comes_only_from_the_configuration",
        "test_file_reader_reads_in_its_folder_only",
        "test_hostile_output_is_neutralised_and_binary_described",
        "test_http_server_and_a_name_two_servers_share",
        "test_names_offered_to_the_model_are_unique_and_each_reaches_its_own_server",
        "test_no_orphan_processes_after_close",
        "test_server_that_hangs_at_start_times_out_and_is_stopped",
        "test_stdio_calculator_lists_and_calls_tools",
        "test_ten_megabyte_result_is_bounded",
        "test_tool_that_hangs_times_out_and_the_server_keeps_working",
    },
    "tests/app/tools/test_mcp_config.py": {
        "test_cli_add_list_remove",
        "test_cli_list_shows_a_tool_name_with_escapes_neutralised",
    },
    "tests/app/tools/test_remote_tools.py": {
        "test_a_real_mlx_lm_server_takes_the_tools_and_a_tool_round",
    },
    "tests/app/tools/test_tool_loop.py": {
        "test_approved_call_runs_and_the_model_continues",
        "test_denied_call_does_not_run",
        "test_round_limit_ends_a_loop_with_a_clear_line",
    },
    "tests/app/transcripts/test_export.py": {
        "test_megabyte_of_unmatched_emphasis_is_fast",
    },
    "tests/bench/test_figures.py": {"*"},  # the whole file
    "tests/engine/context/test_kinds.py": {
        "test_restored_recurrent_state_equals_a_one_shot_prefill",
    },
    "tests/engine/context/test_memory_hostile.py": {
        "test_a_hostile_saved_cache_is_dropped_and_the_chat_read_again",
    },
    "tests/engine/context/test_policy.py": {
        "test_a_long_chat_slides_in_steps_and_every_reply_equals_a_fresh_computation",
    },
    "tests/engine/context/test_quantized_cache.py": {
        "test_a_quantized_chat_reuses_the_whole_history_on_every_follow_up",
        "test_every_4_bit_reply_equals_mlx_lm_with_its_quantized_cache_read_in_some_chunks",
        "test_every_8_bit_reply_equals_mlx_lm_with_its_quantized_cache",
        "test_every_step_of_the_family_script_on_an_8_bit_cache_equals_mlx_lms_quantized_computation",
        "test_every_step_of_the_family_script_on_an_8_bit_cache_reuses_what_it_shares",
    },
    "tests/engine/local/test_background.py": {
        "test_replay_pause_lets_the_next_window_be_prepared",
    },
    "tests/engine/local/test_speculative.py": {
        "test_a_draft_model_gives_the_ids_of_plain_decoding_and_its_cache_follows",
        "test_acceptance_rule_keeps_the_processed_distribution",
        "test_greedy_ids_are_those_of_plain_decoding_across_growth_and_trims",
        "test_sampled_replies_have_the_distribution_of_plain_decoding",
        "test_window_draft_model_setting_drafts_and_a_foreign_one_fails_the_reply",
        "test_window_shows_the_acceptance_rate_and_preferences_turn_it_off",
    },
    "tests/engine/models/gguf/test_hostile.py": {
        "test_big_metadata_arrays_cost_little_memory",
    },
    "tests/engine/models/test_catalogue.py": {
        "test_a_failed_download_is_said_once_in_the_open_dialog",
        "test_search_pick_and_download_from_the_stand_in_hub",
    },
    "tests/engine/remote/test_hostile_servers.py": {
        "test_a_compressed_stream_is_read_as_any_other",
        "test_a_gzip_bomb_in_a_stream_is_stopped_at_the_bound_without_inflating",
        "test_a_gzip_bomb_model_list_is_one_line_and_costs_no_memory",
        "test_a_huge_model_list_or_error_body_is_bounded",
        "test_a_line_an_event_or_a_stream_that_never_ends_is_one_line",
        "test_a_model_list_sent_one_byte_at_a_time_meets_a_total_deadline",
        "test_a_reply_then_only_keepalives_keeps_the_reply_and_names_the_figure",
        "test_an_encoding_chinwag_does_not_read_or_a_damaged_body_is_one_line",
        "test_json_nested_a_million_deep_is_one_line_not_a_bug",
        "test_keepalives_that_report_no_progress_do_not_hold_a_reply_forever",
        "test_progress_that_never_becomes_a_reply_gives_up_after_the_prompt_deadline",
        "test_well_formed_json_of_the_wrong_shape_is_one_line_naming_the_server",
    },
    "tests/engine/remote/test_mlx_server.py": {
        "test_distributed_mlx_lm_server_streams_through_chinwag",
    },
    "tests/engine/remote/test_standin.py": {
        "test_a_stalled_stream_times_out_with_a_clear_line",
        "test_chat_in_the_terminal_through_a_saved_server",
    },
    "tests/engine/test_families.py": {"*"},  # the whole file
    "tests/engine/test_log.py": {
        "test_processes_rotating_the_log_at_once_print_no_logging_errors",
    },
    "tests/test_fuzz.py": {
        "test_conversation_import_fuzz",
        "test_gguf_header_fuzz",
    },
    "tests/test_qt_free.py": {
        "test_qt_free_modules_never_import_pyside6",
    },
    "tests/test_tiny_families.py": {
        "test_a_recurrent_state_one_token_behind_changes_the_continuation",
        "test_greedy_decoding_is_not_degenerate",
        "test_the_first_of_120_prompt_tokens_changes_the_continuation",
        "test_the_recurrent_state_alone_carries_the_first_of_120_tokens",
    },
}
